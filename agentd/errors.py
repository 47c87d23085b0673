"""One exception root for agentd, split by who has to act.

    AgentdError
    ├── OperatorError          the operator must fix something (config, keys)
    │   ├── ConfigError        a YAML file is wrong: file, line, column, what was expected
    │   ├── CredentialError    a provider needs a key that is not set
    │   └── DataFolderInUse    another daemon holds the data folder: names its PID and address
    └── RuntimeFault           something outside our control failed; retrying may help
        ├── ProviderError      a model provider failed (names provider, model, fix)
        ├── ModelPaused        a memory model that keeps failing is left alone for a while
        └── StoreError         the agent's data could not be read or written
            ├── NewerSchema    the data was written by a newer agentd: upgrade agentd
            ├── LeaseLost      another daemon took the conversation over: this write was refused
            └── NotStored      nothing of this agent is stored (a read-only look creates nothing)

`ToolError` is not an AgentdError: it is the normal way a tool tells the model
that a call was refused, and it becomes a tool result the model can read.
"""

from __future__ import annotations

from dataclasses import dataclass


class AgentdError(Exception):
    """Root of every error agentd raises on purpose."""


class OperatorError(AgentdError):
    """The operator has to change something before this can work."""


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with one config file, located as precisely as we can."""

    file: str
    line: int | None
    column: int | None
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.message}"


class ConfigError(OperatorError):
    """One or more problems in a config file; str() lists each on its own line."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class CredentialError(OperatorError):
    """A provider needs a key that is not configured; the message names where to set it.

    Like ProviderError it names the provider and the model, so a run that fails
    on it is recorded the same way; unlike it, retrying cannot help.
    """

    reason = "missing_key"  # what failed, in the words ProviderError.reason uses (a fallback's reason)

    def __init__(self, *, provider: str, model: str, key_env: str | None):
        self.provider = provider
        self.model = model
        self.key_env = key_env
        where = f"{key_env} or " if key_env else ""
        super().__init__(
            f"provider {provider} (model {model}): no API key: "
            f"set {where}providers.{provider}.api_key in agentd.yaml"
        )


class DataFolderInUse(OperatorError):
    """Another agentd holds the data folder's lock; the message names it so the operator can find it.

    `pid`, `host` and `http_address` come from the holder's lock file and are None when it has not
    written them (it has not bound its port yet) or they cannot be read.
    """

    def __init__(
        self,
        folder: str,
        *,
        pid: int | None,
        host: str | None,
        http_address: str | None,
        since: str | None,
        agents_dir: str | None = None,
    ):
        self.folder = folder
        self.pid = pid
        self.host = host
        self.http_address = http_address
        who = f"pid {pid}" if pid is not None else "a process that did not say its pid"
        if host:
            who += f" on {host}"
        who += f", serving {http_address}" if http_address else ", HTTP address not bound yet"
        if agents_dir:
            who += f" for the agents folder {agents_dir}"
        if since:
            who += f", since {since}"
        super().__init__(
            f"data folder {folder} is in use by another agentd ({who}); "
            "stop that daemon, or give this one its own data folder"
        )


class RuntimeFault(AgentdError):
    """Something at run time failed; the operator may not need to change anything."""


# What failed, as `ProviderError.reason` says it: the engine decides from it whether the next model
# of a fallback chain is tried (agentd.engine.model_chain), and /metrics counts fallbacks by it.
RATE_LIMITED = "rate_limited"  # 429, once the provider's own retries (Retry-After honoured) are spent
OVERLOADED = "overloaded"  # 529, Anthropic's overloaded_error
SERVER_ERROR = "server_error"  # 5xx
TIMEOUT = "timeout"  # no answer in time (408 included)
CONNECTION = "connection"  # refused, reset, DNS: the provider could not be reached
AUTH = "auth"  # 401/403: the key was refused
NOT_FOUND = "not_found"  # 404: that model (or endpoint) is not served there
INVALID_REQUEST = "invalid_request"  # 400/413/422: this request is wrong, whichever model gets it
CONTEXT_OVERFLOW = "context_overflow"  # the prompt is longer than the model's context window
STREAM_BROKEN = "stream_broken"  # the stream broke off or stalled after the reply began
UNREADABLE = "unreadable"  # a 2xx whose body is not what the API promises
OTHER = "other"


class ProviderError(RuntimeFault):
    """A model provider call failed for good (after any retries).

    The message names the provider, the model and what to do about it; `status`
    is the HTTP status when there was one; `reason` says what failed (one of the
    names above), so the engine can tell a dead model from a bad request.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        model: str,
        status: int | None = None,
        retryable: bool = False,
        unreachable: bool = False,
        reason: str = OTHER,
    ):
        self.provider = provider
        self.model = model
        self.status = status
        self.retryable = retryable
        self.reason = reason
        # True when the provider could not be reached at all (connection refused,
        # timeout): memory work that can wait keeps its queue for the next turn.
        self.unreachable = unreachable
        super().__init__(f"provider {provider} (model {model}): {message}")


class ModelPaused(RuntimeFault):
    """A memory model's breaker is open: no call was made; the work is retried in `retry_in` seconds."""

    def __init__(self, message: str, *, model: str, retry_in: float):
        self.model = model
        self.retry_in = retry_in
        super().__init__(message)


class StoreError(RuntimeFault):
    """The agent's data (a SQLite file, a PostgreSQL database) could not be opened, migrated, read or written."""


class DatabaseUnavailable(StoreError):
    """The PostgreSQL database did not answer, could not be reached, or refused. `public` says so for
    anyone, naming the database but never its host or port (the message, for the log, has them)."""

    def __init__(self, message: str, public: str):
        super().__init__(message)
        self.public = public


class NewerSchema(StoreError):
    """The data was migrated by a newer agentd than this one: this agent cannot start until agentd is upgraded."""


class LeaseLost(StoreError):
    """A daemon sharing the store took the conversation over (this one stopped renewing its lease, for
    longer than the lease lasts): the write was refused and nothing of it was kept."""


class NotStored(StoreError):
    """A store opened read-only holds nothing of the agent: no SQLite file, no row in the database."""


class ToolError(Exception):
    """A tool refused a call; the message is shown to the model as the tool result."""
