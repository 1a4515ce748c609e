"""Differential-privacy guarantees on the wire: a snapshot's, and a node's status ledger.

`PrivacyParams` is the guarantee a subspace message (and a FedPower reply) carries, and the
one type of a privacy guarantee above the numerics (a node's configured one,
`edge_runtime.topology.NodeConfig.privacy`; a model's, `edge_runtime.monitor.privacy_of`;
`PrivacyParams.to_json` its JSON map);
`PrivacyStatus` the ledger of a status document (the guarantee plus the noise scale and
counts). Both check the same budget fields (``_set_budget``), and the maps they travel as are
read and written here only: ``privacy_to_wire`` / ``privacy_from_wire`` for the msgpack
map of a subspace message or a reply, ``privacy_status_from_json`` for a status
document's (whose map, `PrivacyStatus.as_dict`, keeps its own key order). Maps of older
peers lack ``mechanism`` and ``neighbours``: they decode as `LEGACY_MECHANISM`
and `LEGACY_NEIGHBOURS` (the package docstring, "Privacy parameters of older peers").
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_runtime.wire.fields import WireError, as_float, as_int, fail_type, show

__all__ = [
    "LEGACY_MECHANISM",
    "LEGACY_NEIGHBOURS",
    "MAX_PRIVACY_NAME_CHARS",
    "PrivacyParams",
    "PrivacyStatus",
    "check_privacy_type",
    "privacy_from_wire",
    "privacy_status_from_json",
    "privacy_to_wire",
]

MAX_PRIVACY_NAME_CHARS = 32
"""Longest ``mechanism`` / ``neighbours`` name of a privacy map, in characters."""

LEGACY_MECHANISM = "fpca-eq8"
"""``mechanism`` of a privacy map that has none (older peers only had eq. (8))."""

LEGACY_NEIGHBOURS = "replace-one"
"""``neighbours`` of a privacy map that has none (the relation eq. (8) is calibrated for)."""

_PRIVACY_KEYS = ("epsilon", "delta", "clip_norm")
_PRIVACY_NAME_KEYS = ("mechanism", "neighbours")
_PRIVACY_STATUS_KEYS = ("noise_std", "block_size", "chunk_size", "horizon", "releases", "clipped")
_PRIVACY_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+-")


@dataclass(frozen=True)
class PrivacyParams:
    """The differential-privacy guarantee of a published subspace.

    Every reading the subspace covers is ``(epsilon, delta)``-differentially private with
    respect to everything published, for neighbouring datasets under the relation
    ``neighbours``, by the mechanism ``mechanism`` (`edge_runtime.fpca.privacy`).

    Parameters
    ----------
    epsilon : float
        Privacy budget epsilon, > 0.
    delta : float
        Failure probability delta, 0 < delta < 1.
    clip_norm : float
        Bound on the L2 norm of each sample (row) before the noise is calibrated, > 0, in
        the readings' units.
    mechanism : str, default "gaussian"
        The mechanism: ``"gaussian"`` (Gaussian mechanism on block Gram matrices, analytic
        calibration) or ``"fpca-eq8"`` (streaming MOD-SuLQ, eq. (8) of Grammenos et al.
        2020); an aggregator over several reports their sorted names joined by ``+``
        (``"fpca-eq8+gaussian"``). Any name of 1 to `MAX_PRIVACY_NAME_CHARS` characters
        from ``[a-z0-9+-]`` is carried (names of later versions included).
    neighbours : str, default "replace-one"
        The neighbouring relation the guarantee holds for (same rules as ``mechanism``).
        Sample counts are published, so only replace-one is claimed, never add/remove.

    Raises
    ------
    WireError
        reason ``field_type`` for a non-number (bools are refused) or a non-str name,
        ``non_finite`` for NaN or inf, ``privacy`` for a value out of range or a bad name.
    """

    epsilon: float
    delta: float
    clip_norm: float
    mechanism: str = "gaussian"
    neighbours: str = LEGACY_NEIGHBOURS

    def __post_init__(self) -> None:
        _set_budget(self)

    def to_json(self) -> dict[str, float | str]:
        """The guarantee as a JSON (or msgpack) map: keys ``epsilon, delta, clip_norm,
        mechanism, neighbours`` in this order. The one place the guarantee becomes a map:
        the ``privacy`` map of a subspace message or a FedPower reply
        (``privacy_to_wire``), of ``edge-runtime run --json`` and ``watch``
        (`edge_runtime.cli.output`) and of the dashboard's model."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "clip_norm": self.clip_norm,
            "mechanism": self.mechanism,
            "neighbours": self.neighbours,
        }


def _privacy_name(label: str, value: object) -> str:
    """A mechanism or neighbours name: 1-32 characters from ``[a-z0-9+-]``."""
    if not isinstance(value, str):
        fail_type(label, value, "a str")
    if not 1 <= len(value) <= MAX_PRIVACY_NAME_CHARS or not set(value) <= _PRIVACY_NAME_CHARS:
        raise WireError(
            "privacy",
            f"{label} is {show(value)}, expected 1 to {MAX_PRIVACY_NAME_CHARS} characters "
            "from [a-z0-9+-]",
        )
    return str(value)


def _set_budget(obj: PrivacyParams | PrivacyStatus) -> None:
    """Check and normalise ``epsilon``, ``delta``, ``clip_norm``, ``mechanism`` and
    ``neighbours`` of a frozen ``obj``."""
    epsilon = as_float("privacy.epsilon", obj.epsilon)
    delta = as_float("privacy.delta", obj.delta)
    clip_norm = as_float("privacy.clip_norm", obj.clip_norm)
    if not epsilon > 0:
        raise WireError("privacy", f"privacy.epsilon is {epsilon!r}, expected > 0")
    if not 0 < delta < 1:
        raise WireError("privacy", f"privacy.delta is {delta!r}, expected 0 < delta < 1")
    if not clip_norm > 0:
        raise WireError("privacy", f"privacy.clip_norm is {clip_norm!r}, expected > 0")
    object.__setattr__(obj, "epsilon", epsilon)
    object.__setattr__(obj, "delta", delta)
    object.__setattr__(obj, "clip_norm", clip_norm)
    for key in _PRIVACY_NAME_KEYS:
        object.__setattr__(obj, key, _privacy_name(f"privacy.{key}", getattr(obj, key)))


@dataclass(frozen=True)
class PrivacyStatus:
    """The differential-privacy ledger a node reports in its status document.

    A private leaf reports its own settings and counts; an aggregator (the leaf-only fields
    None) the weakest guarantee over the leaves its snapshot covers, as in its subspace
    message's `PrivacyParams`. In the JSON document it is the object ``privacy`` with these
    field names as keys (null for None; written in the order mechanism, epsilon, delta,
    neighbours, clip_norm, noise_std, block_size, chunk_size, horizon, releases, clipped),
    or null when the node publishes without noise. Unknown keys are ignored on read; see
    the module docstring for documents of older peers.

    Parameters
    ----------
    epsilon, delta, clip_norm, mechanism, neighbours
        As `PrivacyParams`.
    noise_std : float or None
        The noise scale of one release, in units of the readings scaled to the unit ball
        (``reading / clip_norm``); finite and >= 0. ``"gaussian"``: sigma, the std of the
        entries of each release's noise matrix ``W`` (unit-ball Gram units,
        `edge_runtime.fpca.private_gram.release_noise_std`); ``"fpca-eq8"``: omega of
        eq. (8) of the last masked block (covariance units; a full block's before the
        first).
    block_size : int or None
        Readings per block (one release each), >= 1.
    chunk_size : int or None
        Columns of the masked covariance built at a time (eq. (7), ``"fpca-eq8"`` only),
        >= 1.
    horizon : int or None
        Releases per segment of the continual release (``"gaussian"`` only), >= 1.
    releases : int or None
        Blocks released so far, >= 0.
    clipped : int or None
        Readings so far whose norm exceeded ``clip_norm`` (scaled down to it), >= 0.

    Raises
    ------
    WireError
        ``field_type`` for a value of the wrong type (a bool is not a number, a float is
        not an int), ``non_finite``, ``privacy`` for a value out of range.
    """

    epsilon: float
    delta: float
    clip_norm: float
    noise_std: float | None = None
    block_size: int | None = None
    chunk_size: int | None = None
    mechanism: str = "gaussian"
    neighbours: str = LEGACY_NEIGHBOURS
    horizon: int | None = None
    releases: int | None = None
    clipped: int | None = None

    def __post_init__(self) -> None:
        _set_budget(self)
        if self.noise_std is not None:
            omega = as_float("privacy.noise_std", self.noise_std)
            if not omega >= 0:
                raise WireError("privacy", f"privacy.noise_std is {omega!r}, expected >= 0")
            object.__setattr__(self, "noise_std", omega)
        for key, low in (
            ("block_size", 1),
            ("chunk_size", 1),
            ("horizon", 1),
            ("releases", 0),
            ("clipped", 0),
        ):
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, as_int(f"privacy.{key}", value, "privacy", low=low))

    @property
    def params(self) -> PrivacyParams:
        """The guarantee as carried by subspace messages (budget, clip norm, mechanism,
        neighbours)."""
        return PrivacyParams(
            self.epsilon, self.delta, self.clip_norm, self.mechanism, self.neighbours
        )

    def as_dict(self) -> dict[str, str | float | int | None]:
        """The JSON object of a status document (every key present, None as null)."""
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "neighbours": self.neighbours,
            "clip_norm": self.clip_norm,
            "noise_std": self.noise_std,
            "block_size": self.block_size,
            "chunk_size": self.chunk_size,
            "horizon": self.horizon,
            "releases": self.releases,
            "clipped": self.clipped,
        }


def check_privacy_type(value: object, kind: type) -> None:
    """``field_type`` unless ``value`` (a message's ``privacy``) is None or a ``kind``."""
    if value is not None and not isinstance(value, kind):
        fail_type("privacy", value, f"{kind.__name__} or None")


def privacy_to_wire(privacy: PrivacyParams | None) -> dict[str, str | float] | None:
    """The ``privacy`` map of a subspace message or a FedPower reply (nil for None): keys
    ``epsilon, delta, clip_norm, mechanism, neighbours`` in this order."""
    return None if privacy is None else privacy.to_json()


def _budget_map(value: object, nil: str) -> dict[object, object] | None:
    """A decoded ``privacy`` value: None for ``nil``, else a map holding the budget keys."""
    if value is None:
        return None
    if not isinstance(value, dict):
        fail_type("privacy", value, f"a map or {nil}")
    missing = [key for key in _PRIVACY_KEYS if key not in value]
    if missing:
        raise WireError("missing_field", f"privacy lacks field(s) {', '.join(map(repr, missing))}")
    return value


def _names(value: dict[object, object]) -> dict[str, object]:
    """``mechanism`` and ``neighbours`` of a decoded map, the legacy ones when absent."""
    return {
        "mechanism": value.get("mechanism", LEGACY_MECHANISM),
        "neighbours": value.get("neighbours", LEGACY_NEIGHBOURS),
    }


def privacy_from_wire(value: object) -> PrivacyParams | None:
    """The ``privacy`` map of a subspace message (unknown keys ignored), or None for nil."""
    obj = _budget_map(value, "nil")
    if obj is None:
        return None
    return PrivacyParams(obj["epsilon"], obj["delta"], obj["clip_norm"], **_names(obj))  # type: ignore[arg-type]


def privacy_status_from_json(value: object) -> PrivacyStatus | None:
    """The ``privacy`` map of a status document (unknown keys ignored), or None for null;
    the keys of older peers are defaulted (module docstring)."""
    obj = _budget_map(value, "null")
    if obj is None:
        return None
    keys = _PRIVACY_KEYS + _PRIVACY_STATUS_KEYS
    return PrivacyStatus(**{key: obj.get(key) for key in keys}, **_names(obj))  # type: ignore[arg-type]
