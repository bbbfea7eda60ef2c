"""A facility endpoint the worker polls during a heat soak (a rack PDU's or a CDU's Redfish service),
with its credential opened. portal/facility/selectors.py: facility_endpoints() builds them; the
worker reads them and must pass them on, never print them.

Plain Python: the remote-execution layer reaches no Django model (tests/meta/test_imports.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EndpointKind = Literal["pdu", "loop"]


@dataclass(frozen=True)
class Endpoint:
    """One Redfish endpoint: `kind` "pdu" (RackPDU / PowerDistribution) or "loop" (CoolingUnit),
    the facility model's `name` for it, its URL and credential. `problem` is why it cannot be used
    ("" when it can: e.g. a credential sealed under a key this server no longer holds); then the
    username and password are empty. repr() and str() show neither the password nor the username
    (half a credential), only whether they are set."""

    kind: EndpointKind
    name: str
    url: str
    username: str
    password: str
    verify_tls: bool = True
    racks: tuple[str, ...] = ()
    problem: str = ""

    def __repr__(self) -> str:
        user, secret = ("<set>" if v else "<not set>" for v in (self.username, self.password))
        return (
            f"Endpoint(kind={self.kind!r}, name={self.name!r}, url={self.url!r}, username={user}, "
            f"password={secret}, verify_tls={self.verify_tls!r}, racks={self.racks!r}, problem={self.problem!r})"
        )

    __str__ = __repr__

    @property
    def has_credential(self) -> bool:
        return bool(self.username and self.password)
