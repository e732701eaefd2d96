"""The project's error types, in one module that imports nothing.

Every error a user can fix (a config value, a file, a model folder, a device) derives from
`DepthlabError`, whose message starts with the offending key or file; `depthlab.cli.main_guard`
prints such an error as one line (exit status 2) instead of a traceback. The types keep their
standard base (`ValueError`, `RuntimeError`) so callers that catch those still do. They live here,
not beside the code that raises them, so a module that only catches an error does not import
(and rerun with) the module that raises it.
"""


class DepthlabError(Exception):
    """An error in the user's input or environment; the message names the key or file."""


class UserError(DepthlabError):
    """An error in a script's input (spec, file): printed as one line, exit status 2."""


class ConfigError(DepthlabError, ValueError):
    """A config value that is wrong; the message starts with its key (and file, if any)."""


class DataError(DepthlabError, ValueError):
    """Bad data config or input; the message starts with the offending key."""


class DeviceError(DepthlabError, ValueError):
    """A device was asked for that this machine does not have."""


class UnsupportedModelError(DepthlabError, ValueError):
    """The architecture adapter could not find a part it needs; the message names it and where
    it looked."""


class CheckpointError(DepthlabError, ValueError):
    """A model folder that cannot be used as it is (no config.json, a missing or truncated
    weights file, no tokenizer, a tokenizer larger than the embedding): the message names the
    folder or file and what is wrong."""


class PruningError(DepthlabError, ValueError):
    """Bad pruning settings or inputs; the message starts with the offending key or file."""


class TaskFileError(DepthlabError, ValueError):
    """A task folder or file is missing or malformed; the message names the key and path."""


class ProblemError(DepthlabError, ValueError):
    """Bad problem settings; the message starts with the key."""


class DatasetProblemError(DepthlabError, ValueError):
    """Bad dataset-family settings or records; the message starts with the key."""


class TrackingError(DepthlabError, RuntimeError):
    """The tracking backend cannot start (e.g. W&B online without a login); names the key."""


class GGUFError(DepthlabError, ValueError):
    """A GGUF model that cannot be converted (a missing file or chunk, a wrong sha256, an
    architecture transformers cannot read): the message names the model and the file."""


def check_names(values, known, key: str, noun: str, error: type[Exception] = ValueError) -> None:
    """`values` (a config list) name at least one of `known` and nothing else; else `error`
    naming the key and the known names."""
    names = ", ".join(known)
    if not values:
        raise error(f"{key}: name at least one {noun} ({names})")
    for value in values:
        if value not in known:
            raise error(f"{key}: unknown {noun} '{value}' (known: {names})")
