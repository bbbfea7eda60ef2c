"""A complete demo certificate, so anyone can try issuing and verifying: `kiln_demo --certificate OUT`.

The demo acceptance runs on all eight nodes and its triage (printed) names the two faults; then the
faulty nodes show both exceptions a real handover meets: demo06 (wrong driver) leaves the scope, and
demo03's uncorrectable ECC errors are waived with a justification. Two demo
approvers, one per side, sign; the certificate is issued in this process and written to OUT.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection, transaction

from portal import users
from portal.catalog.models import TestPlan
from portal.certificates import keys, services
from portal.certificates.models import Campaign, Certificate
from portal.certificates.selectors import campaign_state
from portal.inventory.models import Cluster
from portal.roles import APPROVER, OPERATOR, roles_ensure

OUT_OF_SCOPE = {"demo06": "imaged with driver 535.104.05 instead of 550.54.15; goes back for re-imaging"}
WAIVED_NODE = "demo03"
WAIVER = "GPU 5 of demo03 goes back under RMA; the customer accepts the node with 7 GPUs until it returns"
# The two parties of the demo handover, as the certificate names its signers.
VENDOR_ORGANISATION = "Demo GPU Systems Ltd"
CUSTOMER_ORGANISATION = "Demo Research Institute"


def _demo_user(username: str, full_name: str, organisation: str, *groups: str) -> User:
    user, _ = User.objects.get_or_create(username=username)
    user.set_unusable_password()  # they exist to sign the demo; nobody logs in as them
    user.save()
    user.groups.set(Group.objects.filter(name__in=groups))
    return users.user_details_set(username=username, full_name=full_name, organisation=organisation)


def demo_certificate_issue(*, say: Callable[[str], None]) -> Certificate:
    """Run the demo plan on the demo cluster's in-scope nodes and issue its certificate."""
    from portal.demo.facility import facility_served
    from portal.execution.groups import execute_run_inline
    from portal.runs.triage import run_triage
    from portal.runs.triage_export import summary_text

    if not (keys.key_dir() / keys.CURRENT).exists():
        keys.keyring_init(site="Kiln demo site")
        say(f"created demo site keys in {keys.key_dir()} (production sites run `kiln_keys init` once)")
    roles_ensure()
    operator = _demo_user("demo-operator", "Demo Operator", VENDOR_ORGANISATION, OPERATOR)
    vendor = _demo_user("demo-vendor", "Vera Vendor", VENDOR_ORGANISATION, APPROVER, "vendor")
    customer = _demo_user("demo-customer", "Carl Customer", CUSTOMER_ORGANISATION, APPROVER, "customer")
    cluster = Cluster.objects.get(name="demo")
    plan = TestPlan.objects.get(slug="demo-acceptance")
    campaign = services.campaign_create(cluster=cluster, plan=plan, name="Demo acceptance", user=operator)
    with transaction.atomic():
        run = services.campaign_run_start(campaign=campaign, node_set="", user=operator, enqueue=False)
    say(f"campaign #{campaign.pk}: running {plan.slug} on {run.node_set} (about three minutes)")
    # One thread per node on SQLite too: its writes are short phases (portal/execution/execution.py) that
    # wait for the one writer (settings: timeout 30 s, IMMEDIATE), and one node at a time made the
    # demo's timed checks (burn-in, DLC idle and load) run back to back: minutes on a busy machine.
    workers = 8 if connection.vendor == "sqlite" else 16
    with facility_served():  # the plan's heat soak reads the demo's PDUs and CDU
        execute_run_inline(run_id=run.pk, node_ids=list(run.results.values_list("node_id", flat=True).distinct()),
                           max_workers=workers)  # fmt: skip
    # What the run page's triage view shows: one line per cause, the two demo faults.
    say(f"triage of run #{run.pk}:\n" + summary_text(run_triage(run_id=run.pk)).rstrip())
    # The exceptions a real handover meets once the run has shown the faults.
    for hostname, reason in OUT_OF_SCOPE.items():
        node = cluster.nodes.get(hostname=hostname)
        services.node_scope_remove(campaign=campaign, node=node, reason=reason, user=operator)
    _waive_demo03(campaign, vendor)
    services.certificate_sign(campaign=campaign, user=vendor)
    services.certificate_sign(campaign=campaign, user=customer)
    # The second signature also queued the task for a worker; whichever issues first wins.
    certificate = services.certificate_issue(campaign_id=campaign.pk) or campaign.certificates.first()
    if certificate is None:
        campaign.refresh_from_db()
        raise services.CampaignError(f"the demo certificate was not issued: {campaign.issue_error or 'see the audit'}")
    return certificate


def _waive_demo03(campaign: Campaign, approver: User) -> None:
    state = campaign_state(campaign=campaign)
    stray = [f"{c.hostname} × {c.item_key}: {c.state}" for c in state.open_cells if c.hostname != WAIVED_NODE]
    if stray:
        raise services.CampaignError("the demo run failed where the demo has no fault: " + "; ".join(stray))
    for cell in state.open_cells:
        services.waiver_grant(
            campaign=campaign, hostname=cell.hostname, item_key=cell.item_key, justification=WAIVER, user=approver
        )


def demo_certificate_write(*, out: Path, say: Callable[[str], None]) -> Certificate:
    # The demo nodes are this host's own simulators, run by an administrator's command on this host:
    # the local transport is allowed for this process whatever KILN_ALLOW_LOCAL_TRANSPORT says.
    allowed = settings.KILN_ALLOW_LOCAL_TRANSPORT
    settings.KILN_ALLOW_LOCAL_TRANSPORT = True
    try:
        certificate = demo_certificate_issue(say=say)
    finally:
        settings.KILN_ALLOW_LOCAL_TRANSPORT = allowed
    out.write_bytes(bytes(certificate.pdf))
    return certificate
