"""The keys of a topology file, declared once: `TOPOLOGY_KEYS`, one `Key` per key.

Each key's name, TOML kind, default, bounds or choices, unit, the roles it applies to, where
it may be set (``scope``), the keys it shares rules with (``group``) and its doc live here
and nowhere else. Derived from the table: `NodeConfig`'s and `FedPowerConfig`'s fields,
defaults and docstrings; the checks of each value's kind and range (with the rules between
keys in `edge_runtime.topology.node_checks`); the key groups `edge_runtime.topology.loading`
checks a file's tables against; the key reference in ``topologies/README.md``
(`edge_runtime.topology.reference`); and ``edge-runtime agent --prefix``.

Adding a key is adding one row below, a `Key` made by its section's maker (``_leaf``,
``_privacy``, ``_fedpower``, ...: the keywords the section's keys share), and, if it is new
in the reference, regenerating the README: ``python -m edge_runtime.topology.reference``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from edge_runtime.declaration import KIND_NAMES as DECLARED_KIND_NAMES
from edge_runtime.declaration import Bound, Key
from edge_runtime.fpca.continual import MAX_HORIZON

__all__ = [
    "ADMIT_KEYS",
    "ALGORITHMS",
    "BUDGET_KEYS",
    "BUILTIN_DEFAULTS",
    "DATA_KEYS",
    "DEFAULTABLE_KEYS",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_PREFIX",
    "DEFAULT_RELEASE_HORIZON",
    "DEFAULT_SCORE_WARMUP",
    "DEFAULT_SECAGG_SLOT_S",
    "FEDPOWER_KEYS",
    "KEYS",
    "KINDS",
    "KIND_NAMES",
    "NODE_FIELDS",
    "NODE_KEYS",
    "OUT_OF_RANGE_MODES",
    "PRIVACY_KEYS",
    "PUBLISH_KEYS",
    "SCORE_DETECTORS",
    "SCORE_KEYS",
    "SCORE_MODES",
    "SECAGG_KEYS",
    "SECAGG_MECHANISM",
    "SENSOR_KEYS",
    "SPLITS",
    "STALE_POLICIES",
    "TOPOLOGY_KEYS",
    "TOP_LEVEL_KEYS",
    "keys_where",
]

SPLITS: tuple[str, ...] = ("contiguous", "round-robin")
"""The values of ``[data] split``: `edge_runtime.datasets.split.SPLITS`, copied so that an
agent, which needs no data, does not load `edge_runtime.datasets` (a test pins the copy)."""

DEFAULT_PREFIX = "fpca"
"""Topic prefix when the file sets none."""

DEFAULT_BLOCK_SIZE = 50
"""``block_size`` of a node that sets none, except a private leaf of mechanism "gaussian"
(which uses `edge_runtime.fpca.privacy.gaussian_default_block_size`, see `NodeConfig`)."""

DEFAULT_RELEASE_HORIZON = 64
"""``release_horizon`` of a private "gaussian" leaf that sets none (1 when ``forget < 1``).

Chosen by measurement: the noise std of a leaf's k-th release, relative to one release,
is ``sqrt(k)`` with horizon 1 (independent noise per block, summed) but
``continual_multiplier(H) * continual_multiplier(k)`` with horizon ``H``
(`edge_runtime.fpca.continual`); ``continual_multiplier(64)`` is about 1.5, so the first
release pays 1.5x and the 64th 2.4x instead of 8x."""

STALE_POLICIES: tuple[str, ...] = ("keep", "drop", "downweight")
"""What an aggregator does with a child that stopped sending (see `NodeConfig`)."""

SCORE_MODES: tuple[str, ...] = ("off", "reading", "interval")
"""A leaf's ``score``: no scoring, one scores document per reading, or one per interval."""

SCORE_DETECTORS: tuple[str, ...] = ("faults", "static")
"""A scoring leaf's ``score_detector``: the streaming sensor-fault detector warmed on the
leaf's own first readings (`edge_runtime.fpca.FaultDetector`), or Q / T^2 against the root's
model with static limits at ``score_alpha`` (`edge_runtime.fpca.AnomalyScorer`)."""

DEFAULT_SCORE_WARMUP = 2787
"""``score_warmup`` of a leaf that sets none: readings that warm the fault detector (see
`NodeConfig`). One Motes light device-day, the event benchmark's warm-up and the detector's
default ``halflife``. Measured (event benchmark, Motes light, 5 seeds, the same scored rows,
the detector at commit bccbef6 warmed on the last N warm-up rows): N = 800 gave 6.8 clean
alarm events per device-day (budget 2), precision 0.41, NAB 18.9; N = 1500 15.3 events,
precision 0.38; N = 2787 1.7 events, precision 0.90, NAB 26.0. The buffer is
``score_warmup x n_features`` float64 until the detector is built: 1.07 MB for 48 sensors,
6.7 MB for 300."""

OUT_OF_RANGE_MODES: tuple[str, ...] = ("reject", "clip")
"""A leaf's ``out_of_range``: drop a reading with any value outside ``valid_range``, or clip
each value into it."""

SECAGG_MECHANISM = "gaussian-secagg"
"""A private leaf's ``mechanism`` for secure aggregation with its site: its parent sums the
site's masked releases (`edge_runtime.agents.leaf.core.secagg_release`). The topology
accepts it besides `edge_runtime.fpca.privacy.MECHANISMS`, which are `FPCAEdge`'s own (the
estimator does not run it: the leaf's shell does)."""

DEFAULT_SECAGG_SLOT_S = 600.0
"""``secagg_slot_s`` of a secure-aggregation site that sets none: one release slot every ten
minutes. Ten times the phases' timeouts (`edge_runtime.secagg.aggregator_round.
RoundTimeouts`, 60 s in all), so a slot with stragglers ends long before the next; each slot
costs a leaf about 11.5 kB sent and received at d = 48, n = 4 (`edge_runtime.wire.secagg`),
19 B/s; and every released slot adds its noise to the site's running sum (linearly with
H = 1, polylogarithmically within a segment of the continual release), so fewer slots mean
less noise for one model latency of ten minutes, short against the drift of a sensor
network's correlations. 144 slots a day: a segment of 64 (the default horizon) is 10.7 h."""

ALGORITHMS: tuple[str, ...] = ("fpca", "fedpower")
"""The federated algorithms a topology may run (top-level ``algorithm``)."""

_SECONDS = "seconds"
_POSITIVE = Bound(0, low_open=True)
_NON_NEGATIVE = Bound(0)
_UNIT_OPEN = Bound(0, 1, low_open=True, high_open=True)
_PRIVACY_DOC = "Leaves only (a `[defaults]` value skips aggregators; on an aggregator an error)."

# The sections of the table: the keywords their keys share (a key's own keyword wins).
_leaf = partial(Key, scope="defaults", roles="leaf")
_aggregator = partial(Key, scope="defaults", roles="aggregator")
_publish = partial(Key, scope="defaults", group="publish")
_privacy = partial(_leaf, group="privacy")
_score = partial(_leaf, group="score")
_sensor = partial(_leaf, group="sensor")
_secagg = partial(Key, scope="node", roles="aggregator", group="secagg")
_document = partial(Key, scope="document", roles="document")
_data = partial(Key, scope="data", roles="document")


def _fedpower(name: str, kind: str, default: Any, **spec: Any) -> Key:
    """A top-level FedPower key ``fedpower_<attr>``, the field ``<attr>`` of `FedPowerConfig`."""
    attr = name.removeprefix("fedpower_")
    return _document(name, kind, default, group="fedpower", attr=attr, **spec)


TOPOLOGY_KEYS: tuple[Key, ...] = (
    # [[nodes]] and [defaults], in `NodeConfig`'s field order (id, parent, rank, block_size
    # may be given positionally)
    Key("id", "str",
        scope="node", type_doc="string", default_doc="required",
        doc="unique id and MQTT topic level: non-empty, at most 64 characters, no `/`, `+`, "
        "`#`, NUL or control characters, not a topic kind (`subspace`, `status`, `model`, "
        "`confirm`, `scores`, `round`, `reply`)",
    ),
    Key("parent", "str",
        scope="node", type_doc="string", default_doc="none (the root)",
        doc="id of the parent node; exactly one node has none", optional=True,
    ),
    Key("rank", "int",
        scope="defaults", bound=Bound(1), default_doc="required (in `[defaults]` or on each node)",
        doc="initial rank r of the node's subspace; an aggregator truncates its merge to it "
        "(Merge_r, Alg. 2 of Grammenos et al., NeurIPS 2020)",
    ),
    _leaf("block_size", "int", None, type_doc="integer >= `rank`",
        default_doc="`50`; a private `\"gaussian\"` leaf: see [Differential "
        "privacy](#differential-privacy)",
        doc="block size b of the streaming update, eq. (3): memory is one block of b x "
        "n_features; a private leaf releases one block at a time. Unset on a private "
        "`\"gaussian\"` leaf, its block is "
        "`edge_runtime.fpca.privacy.gaussian_default_block_size(epsilon, delta, n_features, "
        "release_horizon)` once the width of a reading is known (`NodeConfig.block_size_for`)",
    ),
    _leaf("adaptive", "bool", False, doc="adapt the rank after each block, eq. (4)"),
    _leaf("rank_bounds", "bounds", (0.01, 0.10),
        type_doc="array of 2 numbers, 0 < lower < upper < 1",
        doc="energy-ratio bounds of eq. (4): above `upper` the rank grows by one, below `lower` "
        "it shrinks by one",
    ),
    _leaf("holdoff", "int", 1, bound=Bound(1), unit="blocks",
        doc="blocks between two rank changes",
    ),
    _publish("idle_flush_s", "float", None, bound=_POSITIVE, unit=_SECONDS,
        default_doc="leaf `0.05`, aggregator `0.05`",
        doc="a node with something unpublished publishes once no input has arrived for this "
        "long (a leaf: at least twice the usual gap between its readings; the trailing publish; "
        "a private leaf masks its pending readings then). Unset: the role's default "
        "(`edge_runtime.agents.common.core.policy.LEAF_PUBLISH` / `AGGREGATOR_PUBLISH`)",
    ),
    _publish("publish_min_interval_s", "float", None, bound=_NON_NEGATIVE, unit=_SECONDS,
        default_doc="leaf `0.1`, aggregator `0.05`",
        doc="least time between two snapshots of the node (the rate limit)",
    ),
    _publish("publish_max_interval_s", "float", None, bound=_NON_NEGATIVE, unit=_SECONDS,
        type_doc="number >= min (seconds)", default_doc="leaf `5.0`, aggregator `0.5`",
        doc="most time a change may wait unpublished",
    ),
    _publish("publish_angle_rad", "float", None, bound=_NON_NEGATIVE, unit="radians",
        default_doc="`0.05`",
        doc="deadband: publish when the largest principal angle between the leading `rank` "
        "directions and the last published ones exceeds this",
    ),
    _publish("publish_spectrum_change", "float", None, bound=_POSITIVE, default_doc="`0.1`",
        doc="deadband: publish when a normalised singular value (`sigma_i / sqrt(n)`) changed "
        "by more than this fraction of the largest",
    ),
    _publish("publish_growth", "float", None, bound=_POSITIVE, default_doc="`1.0`",
        doc="deadband: publish when the sample count grew by this fraction (1.0: doubled), so a "
        "stationary stream publishes O(log n) times",
    ),
    _leaf("sensor_topic", "str", None, scope="node", type_doc="string (MQTT topic filter)",
        default_doc='`"sensors/<id>"` for a leaf',
        doc="where a leaf reads its readings (wildcards `+`/`#` allowed); an error on an "
        "aggregator",
    ),
    _leaf("share", "float", 1.0, bound=_POSITIVE, requirement="a finite number > 0",
        doc="relative share of the dataset's rows a leaf gets with the contiguous split",
    ),
    _leaf("oversample", "int", None, bound=_NON_NEGATIVE, default_doc="FPCAEdge's default",
        doc="extra directions `p` tracked beyond `rank`; snapshots carry `rank + p` directions, "
        "aggregators merge at `rank + p`, the root's `model` is truncated to `rank`",
    ),
    _leaf("forget", "float", 1.0, bound=Bound(0, 1, low_open=True),
        doc="forgetting factor λ of a leaf's block updates (eq. (2)); below 1 for drifting "
        "streams",
    ),
    _leaf("center", "bool", False,
        doc="summarise mean-centred data (streaming mean, merged with the mean correction); the "
        "paper's default is uncentred. Not with privacy (the mean would be published without "
        "noise)",
    ),
    _aggregator("stale_policy", "str", "keep", choices=STALE_POLICIES,
        doc="what an aggregator does with a child whose last snapshot is older than "
        "`stale_after_s`: keep its data in the merge, drop it, or scale its singular values by "
        "`stale_weight`",
    ),
    _aggregator("stale_after_s", "float", 60.0, bound=_POSITIVE, unit=_SECONDS,
        requirement="> 0 seconds", doc="age after which a child counts as stale",
    ),
    _aggregator("stale_weight", "float", 0.5, bound=_UNIT_OPEN,
        doc="factor on a stale child's singular values under `\"downweight\"`",
    ),
    _privacy("epsilon", "float", None, bound=_POSITIVE,
        doc="differential privacy of a leaf: the budget ε per reading (replace-one "
        "neighbours). `epsilon`, `delta` and `clip_norm` come together or not at all; "
        "without them a leaf publishes without noise. " + _PRIVACY_DOC,
    ),
    _privacy("delta", "float", None, bound=_UNIT_OPEN,
        doc="the failure probability δ; keep it below 1 / (number of readings)",
    ),
    _privacy("clip_norm", "float", None, bound=_POSITIVE,
        type_doc="number > 0 (the readings' units)",
        doc="every reading is clipped to this Euclidean norm before it enters a block (the "
        "sensitivity bound of the noise); take it from the sensors' range, never from the data",
    ),
    _privacy("chunk_size", "int", None, bound=Bound(1),
        default_doc="`min(n_features, block_size)`",
        doc="columns of a block's masked covariance built at a time, eq. (7): memory `2 "
        "n_features chunk_size` floats; only with `mechanism = \"fpca-eq8\"`",
    ),
    _privacy("noise_seed", "int", None, scope="node", bound=_NON_NEGATIVE,
        default_doc="none: the operating system's entropy",
        doc="seed of a private leaf's noise, for reproducible experiments only (whoever knows "
        "it can regenerate the noise and remove it); unique per leaf; after a restart the leaf "
        "never replays the seed's stream",
    ),
    _privacy("mechanism", "str", None, type_doc='`"gaussian"`, `"fpca-eq8"` or `"gaussian-secagg"`',
        default_doc='`"gaussian"` (with privacy)',
        doc="the private mechanism, see [Differential privacy](#differential-privacy); needs "
        "privacy. `\"gaussian-secagg\"`: the leaf adds only its share of the noise and masks its "
        "release; its parent, the site, sums the releases of all its `\"gaussian-secagg\"` leaves "
        "securely (`docs/secure_aggregation.md`); they must agree on `epsilon`, `delta`, "
        "`clip_norm` and `release_horizon`, be 3 to 64, under a site that is not `open`",
    ),
    _privacy("release_horizon", "int", None, bound=Bound(1, MAX_HORIZON),
        type_doc=f"integer in 1 .. {MAX_HORIZON}", default_doc="`64` (`1` when `forget < 1`)",
        doc="releases per segment of the continual release of a `\"gaussian\"` leaf; 1 noises "
        "every block independently; only with `mechanism = \"gaussian\"` (or "
        "`\"gaussian-secagg\"`); above 1 needs `forget = 1`",
    ),
    _leaf("source", "table", None,
        scope="node", type_hint="SourceSpec | None", type_doc="inline table",
        default_doc="none: MQTT on `sensor_topic`",
        doc="a leaf's local sensor source, see [Local sensor sources](#local-sensor-sources) "
        "(`edge_runtime.sources.SourceSpec`); an error on an aggregator",
    ),
    _score("score", "str", "off", choices=SCORE_MODES,
        doc="no scoring; one document per reading; one document per `score_interval_s`",
    ),
    _score("score_interval_s", "float", 10.0, bound=_POSITIVE, unit=_SECONDS,
        requirement="> 0 seconds", doc='seconds of one batch in `"interval"` mode',
    ),
    _score("score_alpha", "float", 0.01, bound=_UNIT_OPEN,
        doc="significance of the Q (Jackson-Mudholkar) and T^2 (F) limits (`score_detector = "
        "\"static\"`)",
    ),
    _score("score_allow_private", "bool", False,
        doc="let a private leaf (`epsilon` set) publish scores anyway",
    ),
    _score("score_detector", "str", "faults", choices=SCORE_DETECTORS,
        doc="the sensor-fault detector (no model needed) or Q/T^2 against the root's model with "
        "static limits at `score_alpha`",
    ),
    _score("score_warmup", "int", DEFAULT_SCORE_WARMUP, bound=Bound(2), unit="readings",
        doc="readings that warm the `\"faults\"` detector: the leaf's first ones after it "
        "starts, assumed clean; buffered as `score_warmup x n_features` float64 until the "
        "detector is built (1.07 MB for 48 sensors), then freed",
    ),
    _sensor("valid_range", "range", None, default_doc="none (no check)",
        type_doc="`[lo, hi]`, or `[[lo1, ..., lod], [hi1, ..., hid]]` per feature; finite, lo < "
        "hi",
        doc="the range the leaf's sensors can produce, in their units, from their datasheet "
        "(never from the data); every reading is checked before it reaches FPCA or the anomaly "
        "scores. Per-feature bounds of another width than the readings reject every reading "
        "(reason `valid_range_width`, logged)",
    ),
    _sensor("out_of_range", "str", "reject", choices=OUT_OF_RANGE_MODES,
        doc="what the leaf does with a reading that has any value outside `valid_range`: "
        "`\"reject\"` drops the whole reading (counted in `rejects` as `out_of_range`; it still "
        "counts as ingested in its source's sequence, so it is confirmed and never re-sent or "
        "waited for), `\"clip\"` clips each value into the range and keeps the reading (counted "
        "as `clipped`); `\"clip\"` needs `valid_range`",
    ),
    _sensor("max_reading_rate", "float", None, bound=_POSITIVE, unit="readings per second",
        default_doc="none (not declared)",
        doc="the most readings per second the leaf's sensor can produce, declared for the "
        "plausibility checks of the aggregators (`Topology.max_reading_rate` sums it over the "
        "leaves under a node)",
    ),
    _aggregator("open", "bool", False, scope="node",
        doc="an open aggregator: it also admits children the file does not declare, see [Open "
        "aggregators](#open-aggregators-children-that-join-while-the-tree-runs); a node with "
        "`open = true` is an aggregator even without declared children",
    ),
    _secagg("secagg_threshold", "int", None, bound=Bound(2),
        type_doc='integer t with n / 2 < t <= n (n: the site\'s `"gaussian-secagg"` leaves)',
        default_doc="n - 1",
        doc="aggregators only: the fewest leaves a release slot's sum may hold (up to n - t "
        "drop out per slot; fewer than t: the slot releases nothing). Each leaf adds 1 / t of "
        "the noise, so a slot with all n in has n / t times the calibrated noise",
    ),
    _secagg("secagg_slot_s", "float", None, bound=Bound(2), unit=_SECONDS,
        default_doc=f"{DEFAULT_SECAGG_SLOT_S:g}",
        doc="aggregators only: the period of the site's release slots; every slot releases the "
        "readings its leaves took since the last one, with fresh noise",
    ),
    _aggregator("admit", "table", None,
        scope="node", field=False, type_doc="table (`[nodes.admit]`)",
        default_doc="none: `[defaults]`",
        doc="on an open aggregator only: the settings of the leaves it admits (any key of "
        "`[defaults]`, overriding it)",
    ),
    # the document
    _document("name", "str", None, type_doc="string",
        default_doc="the file name without `.toml`",
        doc="name of the deployment, for logs and summaries",
    ),
    _document("prefix", "str", DEFAULT_PREFIX, type_doc="string", flag="--prefix",
        doc="topic prefix; may have several levels (`\"lab/fpca\"`), but no `+`, `#` or NUL, no "
        "leading or trailing `/`, no empty level, not starting with `$`",
        flag_help="without --topology: the topic prefix of the deployed topology "
        f"(default {DEFAULT_PREFIX!r})",
    ),
    _document("algorithm", "str", "fpca", choices=ALGORITHMS,
        doc="the federated algorithm: FPCA's asynchronous merges, or FedPower's rounds (keys "
        "`fedpower_*`, see [FedPower](#fedpower))",
    ),
    _document("defaults", "table", None, field=False, type_doc="table", default_doc="empty",
        doc="per-node settings applied to every node (see below)",
    ),
    _document("data", "table", None, field=False, type_doc="table", default_doc="empty",
        doc="the dataset a replay deals to the leaves",
    ),
    _document("nodes", "table", None, field=False, type_doc="array of tables",
        default_doc="required", doc="one table per node, in any order; file order is kept",
    ),
    # FedPower (`FedPowerConfig`)
    _fedpower("fedpower_local_steps", "int", 4, bound=Bound(1),
        doc="p: local power iterations of the first round (`edge_runtime.fedpower.Schedule`)",
    ),
    _fedpower("fedpower_decay", "str", "exponential", choices=("exponential", "linear", "none"),
        doc="how p shrinks each round (halved down to 1: the estimate ends in the exact power "
        "method, with no error floor from heterogeneous leaves; measured on Motes light a "
        "constant p = 2 stalls at error ratio 1.006)",
    ),
    _fedpower("fedpower_rounds", "int", 0, bound=_NON_NEGATIVE,
        doc="rounds after which the root stops; 0: open-ended (a streaming deployment). Private "
        "leaves need it > 0: their budget covers `FedPowerConfig.total_iterations` local "
        "iterations",
    ),
    _fedpower("fedpower_quorum", "number", 0, requirement="an integer >= 0 or a fraction in (0, 1)",
        type_doc="integer >= 0 or a fraction in (0, 1)", default_doc="`0` (all leaves)",
        doc="K: replies that close a round early; a fraction of the leaves is rounded up",
    ),
    _fedpower("fedpower_round_timeout_s", "float", 5.0, bound=_POSITIVE, unit=_SECONDS,
        doc="a round closes at the latest this long after its start, with the replies it has, "
        "so a straggler or a dead leaf never stalls it",
    ),
    _fedpower("fedpower_round_interval_s", "float", 0.1, bound=_NON_NEGATIVE, unit=_SECONDS,
        doc="pause between the close of a round and the start of the next",
    ),
    _fedpower("fedpower_idle_interval_s", "float", 5.0, bound=_NON_NEGATIVE, unit=_SECONDS,
        doc="the pause once the estimate settled (the last round moved it by at most "
        "`fedpower_tolerance_rad` and no participant had new readings), so an idle deployment "
        "costs one round per 5 s",
    ),
    _fedpower("fedpower_opt", "bool", True,
        doc="align replies by Orthogonal Procrustes before averaging (false: plain averaging)",
    ),
    _fedpower("fedpower_tolerance_rad", "float", 1e-3, bound=_NON_NEGATIVE, unit="radians",
        doc="settled: largest principal angle between two consecutive global bases; "
        "`edge-runtime run` stops at the first model covering every reading that is this close "
        "to the previous covering one",
    ),
    _fedpower("fedpower_seed", "int", 0, bound=_NON_NEGATIVE,
        doc="seed of the initial basis Z_0 (a QR of a Gaussian (d, r) matrix), which every leaf "
        "derives the same way before the root knows the readings' width",
    ),
    # [data]
    _data("dataset", "str", None, type_doc="string",
        doc="a built-in dataset name (`\"motes-light\"`; wins over a file of the same name) or "
        "the path of a text file of numbers, relative to the topology file's folder (format: "
        "`edge_runtime/datasets/__init__.py`)",
    ),
    _data("split", "str", "contiguous", choices=SPLITS,
        doc="how rows are dealt to the leaves (in file order): `\"contiguous\"` gives each leaf "
        "one range of rows proportional to its `share` (largest-remainder rounding); "
        "`\"round-robin\"` gives row i to leaf i mod (number of leaves), ignoring shares",
    ),
)
"""Every key of a topology file, in `NodeConfig`'s field order first."""

KEYS: dict[str, Key] = {key.name: key for key in TOPOLOGY_KEYS}
"""`TOPOLOGY_KEYS` by name."""


def keys_where(**match: str) -> tuple[Key, ...]:
    """The keys of `TOPOLOGY_KEYS` whose attributes equal ``match`` (e.g. ``group="score"``),
    in table order."""
    return tuple(k for k in TOPOLOGY_KEYS if all(getattr(k, a) == v for a, v in match.items()))


NODE_FIELDS: tuple[Key, ...] = tuple(
    k for k in TOPOLOGY_KEYS if k.scope in ("node", "defaults") and k.field
)
"""The keys that are `NodeConfig`'s fields, in order."""

BUILTIN_DEFAULTS: dict[str, Any] = {
    k.name: k.default for k in keys_where(scope="defaults") if not k.required
}
"""Per-node settings that ``[defaults]`` may set, with their built-in defaults (``rank`` has
none)."""

DEFAULTABLE_KEYS: tuple[str, ...] = tuple(k.name for k in keys_where(scope="defaults"))
"""Keys a ``[defaults]`` table may hold."""

NODE_KEYS: tuple[str, ...] = tuple(k.name for k in TOPOLOGY_KEYS if k.scope in ("node", "defaults"))
"""Keys a ``[[nodes]]`` table may hold."""

ADMIT_KEYS: tuple[str, ...] = DEFAULTABLE_KEYS
"""Keys the ``[nodes.admit]`` table of an open aggregator may hold: the settings of the
leaves it admits at run time, over ``[defaults]`` (the same keys as ``[defaults]``)."""

PRIVACY_KEYS: tuple[str, ...] = tuple(k.name for k in keys_where(group="privacy"))
"""Differential-privacy keys: a leaf's settings only (``[defaults]`` values skip
aggregators)."""

BUDGET_KEYS: tuple[str, ...] = ("epsilon", "delta", "clip_norm")
"""The privacy keys given all together or not at all."""

PUBLISH_KEYS: tuple[str, ...] = tuple(k.name for k in keys_where(group="publish"))
"""Flow-control keys (None: the role's default)."""

SCORE_KEYS: tuple[str, ...] = tuple(k.name for k in keys_where(group="score"))
"""Anomaly scoring of a leaf's readings (leaves only)."""

SENSOR_KEYS: tuple[str, ...] = tuple(k.name for k in keys_where(group="sensor"))
"""What a leaf's sensors can produce, declared from their datasheet (leaves only)."""

SECAGG_KEYS: tuple[str, ...] = tuple(k.name for k in keys_where(group="secagg"))
"""A secure-aggregation site's keys, on the aggregator whose children include leaves of
`SECAGG_MECHANISM` (not in ``[defaults]``)."""

FEDPOWER_KEYS: tuple[str, ...] = tuple(k.name for k in keys_where(group="fedpower"))
"""Top-level keys of a FedPower topology (`FedPowerConfig` without the prefix)."""

TOP_LEVEL_KEYS: tuple[str, ...] = tuple(k.name for k in keys_where(scope="document"))
"""Keys of the document itself."""

DATA_KEYS: tuple[str, ...] = tuple(k.name for k in keys_where(scope="data"))
"""Keys of the ``[data]`` table."""

KINDS: dict[str, str] = {k.name: k.kind for k in TOPOLOGY_KEYS if k.kind != "table"}
"""Expected kind of each key: "int", "float" (an integer is accepted), "bool", "str",
"bounds" (two numbers), "range" (``valid_range``) or "number" (``fedpower_quorum``)."""

KIND_NAMES = DECLARED_KIND_NAMES
"""Each kind of `KINDS` as an error message names it (`edge_runtime.declaration.KIND_NAMES`)."""
