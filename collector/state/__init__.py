"""State built from events: each node's configuration over time and the P<->D request ledger."""

from collector.state.config_timeline import (
    PD_ROLES,
    ConfigChange,
    ConfigTimeline,
    NodeConfig,
    Role,
)
from collector.state.ledger import LEDGER_KINDS, LedgerConfig, LedgerStats, RequestLedger
from collector.state.request_record import SUCCESS_FINISH, RequestRecord, SideRecord

__all__ = [
    "LEDGER_KINDS",
    "PD_ROLES",
    "SUCCESS_FINISH",
    "ConfigChange",
    "ConfigTimeline",
    "LedgerConfig",
    "LedgerStats",
    "NodeConfig",
    "RequestLedger",
    "RequestRecord",
    "Role",
    "SideRecord",
]
