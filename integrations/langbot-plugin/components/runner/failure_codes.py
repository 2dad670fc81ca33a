"""The codes a `run.failed` may carry, as the bridge declares them
(`harness-bridge failure-codes`). Written by scripts/langbot-runners
--builtin; do not edit."""

HARNESS_NOT_FOUND = "harness_not_found"
HARNESS_ERROR = "harness_error"
HARNESS_KILLED = "harness_killed"
NOT_SIGNED_IN = "not_signed_in"
MAX_TURNS = "max_turns"
DEADLINE_EXCEEDED = "deadline_exceeded"
CANCELLED = "cancelled"
INVALID_ARGUMENT = "invalid_argument"
WORKSPACE_ERROR = "workspace_error"
RESOURCE_LIMIT = "resource_limit"
INTERRUPTED = "interrupted"
OUTPUT_TOO_LARGE = "output_too_large"
RATE_LIMITED = "rate_limited"
LIMIT_REACHED = "limit_reached"
INTERNAL_ERROR = "internal_error"
RUNTIME_ERROR = "runtime_error"
DELIVERY_FAILED = "delivery_failed"

ALL = (
    HARNESS_NOT_FOUND,
    HARNESS_ERROR,
    HARNESS_KILLED,
    NOT_SIGNED_IN,
    MAX_TURNS,
    DEADLINE_EXCEEDED,
    CANCELLED,
    INVALID_ARGUMENT,
    WORKSPACE_ERROR,
    RESOURCE_LIMIT,
    INTERRUPTED,
    OUTPUT_TOO_LARGE,
    RATE_LIMITED,
    LIMIT_REACHED,
    INTERNAL_ERROR,
    RUNTIME_ERROR,
    DELIVERY_FAILED,
)
