"""kiln_user (`kiln user`): users with roles and, for approvers, a side."""

from __future__ import annotations

import io
import json
import re
import sys
from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command

from portal.certificates.selectors import signer_side
from portal.models import Person
from portal.people import Named, named, organisation_of
from portal.roles import APPROVER, OPERATOR, VIEWER, has_role

pytestmark = pytest.mark.django_db


def kiln_user(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("kiln_user", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def groups(name: str) -> set[str]:
    return set(User.objects.get(username=name).groups.values_list("name", flat=True))


def test_it_adds_an_operator_without_a_usable_password() -> None:
    out, _ = kiln_user("add", "alice", "--role", "operator", "--email", "alice@example.org")

    assert out.splitlines() == [
        "alice: created (operator)",
        "alice has no password yet: set one with `kiln manage changepassword alice`",
    ]
    alice = User.objects.get(username="alice")
    assert not alice.has_usable_password() and alice.is_active and not alice.is_superuser
    assert alice.email == "alice@example.org"
    assert has_role(alice, OPERATOR) and has_role(alice, VIEWER) and not has_role(alice, APPROVER)


def test_it_adds_approvers_on_each_side_who_can_sign() -> None:
    kiln_user("add", "vera", "--role", "approver", "--side", "vendor")
    kiln_user("add", "carl", "--role", "approver", "--side", "customer")

    assert groups("vera") == {"approver", "vendor"} and groups("carl") == {"approver", "customer"}
    assert signer_side(user=User.objects.get(username="vera")) == "vendor"
    assert signer_side(user=User.objects.get(username="carl")) == "customer"


def test_it_says_an_approver_without_a_side_cannot_sign() -> None:
    out, err = kiln_user("add", "ann", "--role", "approver")

    assert "ann: created (approver)" in out
    assert "ann cannot sign certificates without a side" in err
    assert signer_side(user=User.objects.get(username="ann")) is None


def test_it_refuses_a_side_for_anyone_but_an_approver() -> None:
    with pytest.raises(CommandError, match="--side only applies to approvers"):
        kiln_user("add", "olga", "--role", "operator", "--side", "vendor")
    assert not User.objects.filter(username="olga").exists()


@pytest.mark.parametrize("name", ["bad name", "semi;colon", "x" * 151, ""])
def test_it_refuses_a_bad_user_name(name: str) -> None:
    with pytest.raises(CommandError, match="user name"):
        kiln_user("add", name, "--role", "viewer")
    assert not User.objects.exists()


def test_it_refuses_a_bad_email() -> None:
    with pytest.raises(CommandError, match="'nope' is not an e-mail address"):
        kiln_user("add", "eve", "--role", "viewer", "--email", "nope")
    assert not User.objects.exists()


def test_adding_the_same_user_again_changes_nothing_and_a_different_one_is_refused() -> None:
    kiln_user("add", "vera", "--role", "approver", "--side", "vendor")

    out, _ = kiln_user("add", "vera", "--role", "approver", "--side", "vendor")
    assert out.strip() == "vera: exists already, unchanged (approver, vendor side)"

    with pytest.raises(CommandError, match=r"user 'vera' exists already \(approver, vendor side\).*set-role"):
        kiln_user("add", "vera", "--role", "approver", "--side", "customer")
    with pytest.raises(CommandError, match="exists already"):
        kiln_user("add", "vera", "--role", "operator")
    assert groups("vera") == {"approver", "vendor"} and User.objects.count() == 1


def test_it_sets_a_password_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("correct horse battery\nignored\n"))
    out, _ = kiln_user("add", "dora", "--role", "viewer", "--password-stdin")

    assert "no password yet" not in out
    assert User.objects.get(username="dora").check_password("correct horse battery")


@pytest.mark.parametrize(
    ("typed", "message"), [("\n", "empty"), ("short\n", "password refused: This password is too short")]
)
def test_it_refuses_a_bad_password_and_creates_nobody(
    monkeypatch: pytest.MonkeyPatch, typed: str, message: str
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    with pytest.raises(CommandError, match=message):
        kiln_user("add", "dora", "--role", "viewer", "--password-stdin")
    assert not User.objects.exists()


def test_set_role_replaces_roles_keeps_an_approvers_side_and_drops_it_for_others() -> None:
    kiln_user("add", "vera", "--role", "approver", "--side", "vendor")
    User.objects.get(username="vera").groups.add(Group.objects.create(name="night-shift"))

    out, _ = kiln_user("set-role", "vera", "--role", "approver", "--role", "operator")
    assert out.strip() == "vera: set (operator, approver, vendor side)"
    assert groups("vera") == {"operator", "approver", "vendor", "night-shift"}

    kiln_user("set-role", "vera", "--role", "approver", "--side", "customer")
    assert groups("vera") == {"approver", "customer", "night-shift"}

    kiln_user("set-role", "vera", "--role", "viewer")
    assert groups("vera") == {"viewer", "night-shift"}


def test_set_role_refuses_an_unknown_user() -> None:
    with pytest.raises(CommandError, match=r"no user named 'ghost' \(`kiln user list` shows them\)"):
        kiln_user("set-role", "ghost", "--role", "viewer")


def test_it_disables_and_enables_a_user() -> None:
    kiln_user("add", "alice", "--role", "operator")

    assert kiln_user("disable", "alice")[0].strip() == "alice: disabled"
    assert not User.objects.get(username="alice").is_active
    assert kiln_user("disable", "alice")[0].strip() == "alice: disabled already"
    assert kiln_user("enable", "alice")[0].strip() == "alice: enabled"
    assert User.objects.get(username="alice").is_active
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        kiln_user("disable", "ghost")


def test_it_never_disables_the_last_active_superuser() -> None:
    User.objects.create_superuser(username="admin", password="x")
    with pytest.raises(CommandError, match="admin is the last active superuser"):
        kiln_user("disable", "admin")
    assert User.objects.get(username="admin").is_active

    User.objects.create_superuser(username="root2", password="x")
    kiln_user("disable", "admin")
    assert not User.objects.get(username="admin").is_active


def test_it_lists_users_with_roles_sides_and_state() -> None:
    kiln_user("add", "vera", "--role", "approver", "--side", "vendor", "--email", "vera@example.org")
    kiln_user("add", "alice", "--role", "operator")
    kiln_user("disable", "alice")

    kiln_user("set", "vera", "--full-name", "Vera Vendor", "--organisation", "Example GPU Systems")

    out, _ = kiln_user("list")
    assert out.splitlines() == [
        "alice\toperator\t-\tdisabled\t-\t-\t-",
        "vera\tapprover\tvendor\tactive\tvera@example.org\tVera Vendor\tExample GPU Systems",
    ]
    rows = json.loads(kiln_user("list", "--json")[0])
    assert rows[1] == {
        "username": "vera", "roles": ["approver"], "side": "vendor", "active": True, "superuser": False,
        "email": "vera@example.org", "full_name": "Vera Vendor", "organisation": "Example GPU Systems",
    }  # fmt: skip


def test_it_adds_a_user_with_a_full_name_and_an_organisation() -> None:
    out, _ = kiln_user(
        "add", "vera", "--role", "approver", "--side", "vendor",
        "--full-name", "  Vera   van der Vendor ", "--organisation", "Example GPU Systems Ltd",
    )  # fmt: skip

    assert "vera: full name Vera van der Vendor, organisation Example GPU Systems Ltd" in out.splitlines()
    vera = User.objects.get(username="vera")
    assert (vera.first_name, vera.last_name) == ("Vera", "van der Vendor")
    assert vera.get_full_name() == "Vera van der Vendor"
    assert named(vera) == Named("vera", "Vera van der Vendor", "Example GPU Systems Ltd")
    # The same again is no change; another name or organisation is refused, pointing at `set`.
    again, _ = kiln_user("add", "vera", "--role", "approver", "--full-name", "Vera van der Vendor")
    assert "exists already, unchanged" in again
    with pytest.raises(
        CommandError, match=r"exists already \(Vera van der Vendor, Example GPU Systems Ltd\).*kiln user set"
    ):
        kiln_user("add", "vera", "--role", "approver", "--organisation", "Other Ltd")
    assert organisation_of(User.objects.get(username="vera")) == "Example GPU Systems Ltd"


def test_a_user_without_a_name_or_organisation_is_named_by_username() -> None:
    kiln_user("add", "carl", "--role", "approver", "--side", "customer")

    carl = User.objects.get(username="carl")
    assert named(carl) == Named("carl", "", "") and named(carl).shown == "carl"
    assert not Person.objects.exists()


def test_set_changes_and_clears_the_full_name_and_organisation() -> None:
    kiln_user("add", "carl", "--role", "approver", "--side", "customer")

    out, _ = kiln_user("set", "carl", "--full-name", "Carl Customer", "--organisation", "Example Research Lab")
    assert out.strip() == "carl: full name Carl Customer, organisation Example Research Lab"
    kiln_user("set", "carl", "--organisation", "Example Research Institute")
    carl = User.objects.get(username="carl")
    assert named(carl) == Named("carl", "Carl Customer", "Example Research Institute")
    assert groups("carl") == {"approver", "customer"}, "set leaves roles and side alone"

    out, _ = kiln_user("set", "carl", "--organisation", "")
    assert out.strip() == "carl: full name Carl Customer, organisation (none)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--full-name", "Vera\nVendor"], "full name 'Vera\\nVendor': no control characters"),
        (["--organisation", "Example\tLtd"], "organisation 'Example\\tLtd': no control characters"),
        (["--organisation", "x" * 201], "organisation is 201 characters long: at most 200"),
        (["--full-name", "x" * 151], "the first word and the rest may have at most 150 characters each"),
        ([], "nothing to change: give --full-name and/or --organisation"),
    ],
)
def test_set_refuses_bad_input_and_changes_nothing(args: list[str], message: str) -> None:
    kiln_user("add", "vera", "--role", "viewer", "--full-name", "Vera Vendor", "--organisation", "Example Ltd")

    with pytest.raises(CommandError, match=re.escape(message)):
        kiln_user("set", "vera", *args)
    assert named(User.objects.get(username="vera")) == Named("vera", "Vera Vendor", "Example Ltd")


def test_add_refuses_a_bad_organisation_and_creates_nobody() -> None:
    with pytest.raises(CommandError, match=re.escape("organisation 'A\\x1b[31mB': no control characters")):
        kiln_user("add", "eve", "--role", "viewer", "--organisation", "A\x1b[31mB")
    assert not User.objects.exists()


def test_set_refuses_an_unknown_user() -> None:
    with pytest.raises(CommandError, match=r"no user named 'ghost'"):
        kiln_user("set", "ghost", "--organisation", "Example Ltd")
