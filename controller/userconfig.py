"""The CLI's and the Python client's configuration, like gcloud properties (stdlib only).

A property (`state_store`, `project`, ...) has one environment variable. Its value is the first
of:

1. the environment variable (`RELAUNCH_STATE_STORE=...`), as on Cloud Run;
2. the devstack layer, `cli-layer.json` in the devstack's own directory, which `relaunch
   devstack up` writes and `relaunch devstack down` removes, so the commands after it talk to
   the stand-ins. It is found through `$RELAUNCH_DEVSTACK_DIR` (the shell that evaluated `up`'s
   lines has it), else in `.devstack/` of the working directory or of a folder above it: each
   checkout has its own, and a devstack started in one never repoints a shell in another
   (`RELAUNCH_DEVSTACK_DIR=` set empty means no devstack layer at all);
3. the user's file, `config.json` in the config directory, written by
   `relaunch config set KEY VALUE`;
4. the built-in default, if the property has one.

The config directory is `$RELAUNCH_CONFIG_DIR`, else `$XDG_CONFIG_HOME/relaunch`, else
`~/.config/relaunch`. `export_to_environ()` copies layers 2 and 3 into `os.environ` (never over a
variable already set), so the Google client libraries (`PUBSUB_EMULATOR_HOST`) and the daemon's
`Settings` see the same values as the CLI. Stdlib only: every verb reads it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

CONFIG_FILE = "config.json"
DEVSTACK_LAYER_FILE = "cli-layer.json"
DEFAULT_DEVSTACK_DIR = ".devstack"
DEVSTACK_DIR_VARIABLE = "RELAUNCH_DEVSTACK_DIR"


@dataclass(frozen=True)
class Property:
    name: str
    env: str
    description: str
    default: str | None = None


def default_state_store() -> str:
    """A state store a user can write without root: `$XDG_STATE_HOME/relaunch/state.db`."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return f"sqlite://{(Path(base) / 'relaunch' / 'state.db').absolute()}"


# The properties the CLI itself reads. Any other controller setting (a field of
# controller.settings.Settings) may be set too, as its RELAUNCH_ variable.
PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        Property(
            "state_store",
            "RELAUNCH_STATE_STORE",
            "where the controller keeps job state; the read verbs read it: sqlite:///path or "
            "gs://bucket/prefix",
        ),
        Property(
            "project", "RELAUNCH_PROJECT", "Google Cloud project of the topics and jobs", "relaunch-dev"
        ),
        Property("region", "RELAUNCH_REGION", "Vertex AI region", "us-central1"),
        Property(
            "requests_topic", "RELAUNCH_REQUESTS_TOPIC", "topic job requests go to", "relaunch-requests"
        ),
        Property(
            "verdict_seconds",
            "RELAUNCH_VERDICT_SECONDS",
            "how long `submit` and `cancel` wait for the controller's verdict",
            "60",
        ),
        Property(
            "rpc_timeout_seconds", "RELAUNCH_RPC_TIMEOUT_SECONDS", "deadline of each Google API call", "30"
        ),
        Property(
            "pubsub_emulator_host", "PUBSUB_EMULATOR_HOST", "host:port of a Pub/Sub emulator (devstack)"
        ),
        Property(
            "storage_emulator_host", "STORAGE_EMULATOR_HOST", "URL of a Cloud Storage emulator (devstack)"
        ),
        Property("vertex_endpoint", "RELAUNCH_VERTEX_ENDPOINT", "host:port of a plaintext Vertex JobService"),
        Property("devstack_control", "RELAUNCH_DEVSTACK_CONTROL", "URL of devstack's control server"),
        Property(
            "devstack_dir", "RELAUNCH_DEVSTACK_DIR", "devstack's state directory (`relaunch logs` reads it)"
        ),
        Property(
            "create_subscriptions",
            "RELAUNCH_CREATE_SUBSCRIPTIONS",
            "let `relaunch controller` create missing topics and subscriptions",
        ),
    )
}
_ALIASES = {"GOOGLE_CLOUD_PROJECT": "project"}
# Variables export_to_environ() set in this process: they are the files' values, not the user's.
_EXPORTED: dict[str, str] = {}


class ConfigError(ValueError):
    """An unknown property name or an unreadable config file."""


def config_dir() -> Path:
    explicit = os.environ.get("RELAUNCH_CONFIG_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "relaunch"


def devstack_layer_path() -> Path | None:
    """The devstack layer this shell sees: its devstack dir's, else the nearest `.devstack/`'s."""
    if DEVSTACK_DIR_VARIABLE in os.environ:
        named = os.environ[DEVSTACK_DIR_VARIABLE]
        return Path(named) / DEVSTACK_LAYER_FILE if named else None
    here = Path.cwd()
    for folder in (here, *here.parents):
        candidate = folder / DEFAULT_DEVSTACK_DIR / DEVSTACK_LAYER_FILE
        if candidate.is_file():
            return candidate
    return None


# What `relaunch devstack serve` writes once every stand-in is up, and `down` removes.
_DEVSTACK_RUN_FILE = "env.json"


def stale_devstack_variables() -> str | None:
    """A sentence when this shell still has the variables of a devstack that has been taken
    down (`relaunch devstack down` without the eval): every Google call would then wait for
    stand-ins that are gone."""
    named = os.environ.get(DEVSTACK_DIR_VARIABLE)
    if not named or "PUBSUB_EMULATOR_HOST" not in os.environ or _EXPORTED.get(DEVSTACK_DIR_VARIABLE):
        return None
    if (Path(named) / _DEVSTACK_RUN_FILE).exists() or _answers(os.environ["PUBSUB_EMULATOR_HOST"]):
        return None
    return (
        f"this shell still has the variables of the devstack in {named}, which is not running; "
        'run `eval "$(relaunch devstack down)"` to clear them, or `eval "$(relaunch devstack up)"` '
        "to start it again"
    )


def _answers(host_port: str) -> bool:
    """Whether something listens at host:port (a refused loopback connection is immediate)."""
    import socket

    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=0.5):
            return True
    except (OSError, ValueError):
        return False


def _layer_path(name: str) -> Path | None:
    return devstack_layer_path() if name == DEVSTACK_LAYER_FILE else config_dir() / name


def _read(name: str) -> dict[str, str]:
    path = _layer_path(name)
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object")
    return {str(k): str(v) for k, v in data.items()}


def _write(name: str, values: dict[str, str]) -> Path:
    path = config_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)  # a reader sees the old file or the new one, never half
    return path


def env_name(key: str) -> str:
    """The environment variable of property `key`; ConfigError for a name nobody reads."""
    if key in PROPERTIES:
        return PROPERTIES[key].env
    if key in _setting_names():
        return f"RELAUNCH_{key.upper()}"
    known = ", ".join(sorted(PROPERTIES))
    raise ConfigError(f"unknown property {key!r} (the CLI's: {known}; or any controller setting, see README)")


def _setting_names() -> set[str]:
    # Only `config set/get` of a non-CLI name pays for importing pydantic.
    from controller.settings import Settings

    return set(Settings.model_fields)


def key_for_env(variable: str) -> str | None:
    if variable in _ALIASES:
        return _ALIASES[variable]
    for prop in PROPERTIES.values():
        if prop.env == variable:
            return prop.name
    return None


def lookup(key: str) -> tuple[str | None, str]:
    """(value, where it came from: 'env VAR', 'devstack', 'config', 'default' or 'unset')."""
    variable = env_name(key)
    if os.environ.get(variable) and _EXPORTED.get(variable) != os.environ[variable]:
        return os.environ[variable], f"env {variable}"
    if key == "project" and os.environ.get("GOOGLE_CLOUD_PROJECT"):
        return os.environ["GOOGLE_CLOUD_PROJECT"], "env GOOGLE_CLOUD_PROJECT"
    for layer, name in (("devstack", DEVSTACK_LAYER_FILE), ("config", CONFIG_FILE)):
        values = _read(name)
        if key in values:
            return values[key], layer
    default = default_state_store() if key == "state_store" else _default(key)
    return (default, "default") if default is not None else (None, "unset")


def _default(key: str) -> str | None:
    prop = PROPERTIES.get(key)
    return prop.default if prop else None


def get(key: str) -> str | None:
    return lookup(key)[0]


def require(key: str) -> str:
    """The value of `key`, or a ConfigError that says how to set it."""
    value = get(key)
    if not value:
        raise ConfigError(missing(key))
    return value


def missing(key: str) -> str:
    return f"{key} is not set: export {env_name(key)}=... or run `relaunch config set {key} VALUE`"


def _seconds_problem(value: str) -> str | None:
    try:
        seconds = float(value)
    except ValueError:
        return "must be a number of seconds, such as 60 or 2.5"
    return None if seconds > 0 and seconds != float("inf") else "must be a number of seconds more than 0"


# Properties the CLI reads as numbers; the controller's settings are checked by their own type.
_NUMBERS = {"verdict_seconds", "rpc_timeout_seconds"}


def check_value(key: str, value: str) -> None:
    """ConfigError naming the key, the value and what is allowed, unless `value` may be set."""
    env_name(key)  # refuses unknown names
    problem = _seconds_problem(value) if key in _NUMBERS else None
    if problem is None and key in _setting_names():
        from controller.settings import InvalidSetting, check

        try:
            check(key, value)
        except InvalidSetting as invalid:
            raise ConfigError(str(invalid)) from None
    if problem is not None:
        raise ConfigError(f"{key}={value!r}: {problem}")


def seconds(key: str) -> float:
    """A number-of-seconds property; ConfigError naming where a bad value comes from."""
    value, source = lookup(key)
    problem = "is not set" if value is None else _seconds_problem(value)
    if problem is None and value is not None:
        return float(value)
    fix = f"`relaunch config set {key} SECONDS`" if source in ("config", "default") else f"fix {source}"
    raise ConfigError(f"{key}={value!r} (from {source}): {problem}; {fix}")


def set_value(key: str, value: str) -> Path:
    check_value(key, value)
    values = _read(CONFIG_FILE)
    values[key] = value
    return _write(CONFIG_FILE, values)


def unset_value(key: str) -> bool:
    values = _read(CONFIG_FILE)
    if key not in values:
        return False
    del values[key]
    _write(CONFIG_FILE, values)
    return True


def all_values() -> list[tuple[str, str | None, str]]:
    """(key, value, source) for every CLI property and every other key found in a file."""
    keys = set(PROPERTIES) | set(_read(CONFIG_FILE)) | set(_read(DEVSTACK_LAYER_FILE))
    return [(key, *lookup(key)) for key in sorted(keys)]


def write_devstack_layer(devstack_dir: Path, values: dict[str, str]) -> Path:
    path = devstack_dir / DEVSTACK_LAYER_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def remove_devstack_layer(devstack_dir: Path) -> bool:
    path = devstack_dir / DEVSTACK_LAYER_FILE
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed


def export_to_environ() -> None:
    """Copy the file layers into os.environ where a variable is not already set (env wins)."""
    for layer in (DEVSTACK_LAYER_FILE, CONFIG_FILE):  # the devstack layer first: it overrides config
        for key, value in _read(layer).items():
            try:
                variable = env_name(key) if key in PROPERTIES else f"RELAUNCH_{key.upper()}"
            except ConfigError:
                continue
            if key == "project" and os.environ.get("GOOGLE_CLOUD_PROJECT"):
                continue
            if variable not in os.environ:
                os.environ[variable] = _EXPORTED[variable] = value
