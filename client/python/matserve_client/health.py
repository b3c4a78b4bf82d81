"""The standard gRPC health check (grpc.health.v1.Health/Check) and channel options for targets
that resolve to several servers.

The health messages are two one-field protobufs, encoded here by hand so that the package needs
no extra generated stubs: HealthCheckRequest { string service = 1; } and
HealthCheckResponse { ServingStatus status = 1; }.
"""
from typing import Any, List, Sequence, Tuple

from ._wire import read_varint, varint

STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
METHOD = "/grpc.health.v1.Health/Check"


def encode_request(service: str) -> bytes:
    """HealthCheckRequest for `service` ("" asks about the server as a whole)."""
    name = service.encode()
    return b"\x0a" + varint(len(name)) + name if name else b""


def decode_status(reply: bytes) -> str:
    """The ServingStatus name of a HealthCheckResponse ("UNKNOWN" when the field is absent)."""
    i, status = 0, 0
    while i < len(reply):
        key, i = read_varint(reply, i)
        if key == 0x08:  # field 1, varint
            status, i = read_varint(reply, i)
        elif key & 7 == 2:  # a length-delimited field this version does not know
            length, i = read_varint(reply, i)
            i += length
        elif key & 7 == 0:
            _, i = read_varint(reply, i)
        else:
            raise ValueError(f"health reply: unexpected wire type {key & 7}")
    return STATUS_NAMES.get(status, f"STATUS_{status}")




def balancing_options(target: str, options: Sequence[Tuple[str, Any]]) -> List[Tuple[str, Any]]:
    """Round robin over every address a `dns:` target resolves to (a Kubernetes headless Service,
    docs/deploy.md), unless the caller chose a policy or a service config; gRPC's default,
    pick_first, would send every call to the first address."""
    names = {name for name, _ in options}
    if target.startswith("dns:") and not names & {"grpc.lb_policy_name", "grpc.service_config"}:
        return [("grpc.lb_policy_name", "round_robin")]
    return []
