"""Errors a user can act on. The CLI prints ``str(error)`` as one line and exits with the error's
``exit_code`` (2, bad input; 4 where the machine failed the run); never a traceback."""


class HarnessError(Exception):
    """A problem with the user's input or machine, stated in one line."""

    exit_code = 2


class InfrastructureError(HarnessError):
    """The machine, not the input, failed the run (a full disk): a harness fault to CI, not bad input."""

    exit_code = 4


class ConfigError(HarnessError):
    """A broken ``[tool.harness]`` table or environment override; the message names the key."""


class DeviceMaskError(HarnessError):
    """A visible-devices variable that cannot be parsed or mapped; the message names variable and value."""


class PlatformError(HarnessError):
    """The platform cannot be decided or its management library does not answer."""


class MemoryTimeout(HarnessError):
    """Device memory did not come under a threshold in time; the message says what the devices hold."""


class RunnerBlocked(HarnessError):
    """A runner cannot start because live runners or fixtures hold the memory it needs; names them."""


class ReportError(HarnessError):
    """A report file that is missing, truncated, not JSON, or of another format version."""
