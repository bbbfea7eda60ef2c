"""What an API request can set, walked like tests/security/test_operator_inputs.py walks the forms:
no serializer of any API endpoint lets a non-superuser write a field that chooses what executes."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.test import APIRequestFactory

from portal.api import serializers as api_serializers
from portal.api import serializers_evidence
from portal.api.urls import router
from tests.security.test_operator_inputs import EXECUTABLE_NAME

NEVER = {"transport", "ssh_key_path", "local_env", "params", "param_overrides", "plan_snapshot", "argv", "command"}


def _serializer_classes() -> list[type[serializers.BaseSerializer[Any]]]:
    found = []
    for module in (api_serializers, serializers_evidence):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, serializers.BaseSerializer):
                if value.__module__ == module.__name__:
                    found.append(value)
    return found


def _writable(serializer_class: type[serializers.BaseSerializer[Any]], user: Any) -> set[str]:
    request = APIRequestFactory().post("/")
    request.user = user
    fields = serializer_class(context={"request": request}).fields  # type: ignore[attr-defined]
    return {name for name, field in fields.items() if not field.read_only}


def test_it_walks_every_serializer_of_every_endpoint() -> None:
    classes = set(_serializer_classes())
    used = {
        viewset.serializer_class
        for _, viewset, _ in router.registry
        if getattr(viewset, "serializer_class", None) is not None
    }
    assert used <= classes
    assert api_serializers.ClusterSerializer in classes and api_serializers.NodesAddSerializer in classes


def test_no_serializer_lets_an_operator_write_what_executes(make_user) -> None:
    operator = make_user("olga", "operator")
    offending = {
        f"{cls.__name__}.{name}"
        for cls in _serializer_classes()
        for name in _writable(cls, operator)
        if name in NEVER or EXECUTABLE_NAME.search(name)
    }
    assert offending == set()


def test_a_superuser_may_write_the_superuser_fields(make_user) -> None:
    root = make_user("root", superuser=True)
    assert {"transport", "ssh_key_path"} <= _writable(api_serializers.ClusterSerializer, root)
