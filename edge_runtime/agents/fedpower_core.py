"""FedPower on the runtime, the synchronous part: a leaf core and the root's server core.

No I/O, no clock (time comes in as an argument), as every core of `edge_runtime.agents`.

- `GramEstimator` keeps a leaf's `LocalGram` behind the estimator interface `LeafCore`
  drives, so a FedPower leaf shares the FPCA leaf's whole data path (sensor topic, replay,
  local sources, sequencing, confirmations, checkpoints, retained-snapshot restore).
- `FedPowerLeafCore` is a `LeafCore` with that estimator, plus the round logic: on a
  round message it runs the round's local iterations (`local_iterations`) on ``A_l = S/n``
  from the round's basis and replies with ``Y`` and its sample count (a leaf without
  readings does not reply; a leaf replies at most once per round per process).
- Differential privacy (a leaf with ``epsilon``, ``delta``, ``clip_norm``; mechanism
  `edge_runtime.fedpower.accounting.MECHANISM`): readings are clipped into the unit ball
  (``LocalGram(clip_norm=C)``), every local iteration adds Gaussian noise calibrated by
  `fedpower_noise_std` for the ``T`` local iterations of the bounded schedule
  (`FedPowerConfig.total_iterations`), the leaf stops replying once it has run ``T``, its
  replies carry the guarantee and it never publishes its Gram (no restore snapshot: a
  private leaf restarts from its checkpoint, or empty).
- `FedPowerRootCore` wraps `FedPowerServer` (Algorithm 3, partial participation: a round
  closes with ``K`` replies or at its timeout; later replies are dropped and counted) and
  decides when to start rounds, when to close them and what model to publish.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edge_runtime.agents.aggregator_core import weakest_guarantee
from edge_runtime.agents.core import NodeCore
from edge_runtime.agents.leaf_core import LeafCore
from edge_runtime.agents.policy import AGGREGATOR_PUBLISH, StatusPolicy
from edge_runtime.fedpower import FedPowerServer, LocalGram, Schedule, local_iterations
from edge_runtime.fedpower.accounting import (
    fedpower_noise_std,
    power_step_sensitivity,
)
from edge_runtime.fedpower.aggregation import procrustes_rotation
from edge_runtime.fedpower_wire import ReplyMessage, RoundMessage, initial_basis
from edge_runtime.fpca import Subspace
from edge_runtime.topology import FedPowerConfig
from edge_runtime.wire import PrivacyParams, SubspaceMessage

__all__ = [
    "FedPowerLeafCore",
    "FedPowerRootCore",
    "GramEstimator",
    "largest_angle",
    "schedule_of",
    "weakest_guarantee",
]


def schedule_of(config: FedPowerConfig) -> Schedule:
    """The (unbounded) `Schedule` of a topology's FedPower settings."""
    decay = None if config.decay == "none" else config.decay
    return Schedule(config.local_steps, decay=decay)


def largest_angle(a: np.ndarray, b: np.ndarray) -> float:
    """Largest principal angle between the column spaces of orthonormal ``a`` and ``b``."""
    residual = b - a @ (a.T @ b)
    return float(math.asin(min(1.0, float(np.linalg.norm(residual, 2)))))


class GramEstimator:
    """A `LocalGram` with the attributes `LeafCore` reads of an `FPCAEdge`.

    Its ``tracked_subspace`` is the Gram matrix itself, exactly, as a full-rank subspace
    ``S = U diag(sigma**2) U^T`` (eigendecomposition): a non-private leaf's snapshot on its
    own ``subspace`` topic is its restore point (a restarted leaf without a checkpoint
    rebuilds ``S`` from it) and what makes its readings durable; the federation never reads
    it. A private estimator's Gram is never published (`FedPowerLeafCore`).

    Privacy (``privacy = (epsilon, delta)`` with ``clip_norm`` and ``iterations`` ``T``):
    rows are clipped into the unit ball (`LocalGram` ``clip_norm``) and `iterate` adds
    i.i.d. Gaussian noise to every local product. ``noise_std_`` is ``sigma =
    fedpower_noise_std(epsilon, delta, T, power_step_sensitivity(rank))`` in the units of
    ``S Q`` (unit-ball rows, `edge_runtime.fedpower.accounting`); the iterations run on
    ``A = S / n`` (the reply's weight is ``n``), so each product gets ``sigma / n``, which
    is ``(S Q + sigma G) / n``: the calibrated mechanism followed by post-processing.
    At most ``T`` iterations are run (`budget_left`).
    Memory: ``8 d**2`` bytes.
    """

    chunk_size = None
    n_pending_ = 0
    horizon = 1

    def __init__(
        self,
        n_features: int,
        rank: int,
        *,
        privacy: PrivacyParams | None = None,
        iterations: int | None = None,
        random_state: Any = None,
    ) -> None:
        self.n_features_ = n_features
        self.rank_ = min(rank, n_features)
        self.block_size = 1
        self.n_blocks_ = 0
        self.n_releases_ = 0  # local iterations run (each one a noisy release when private)
        self.n_clipped_ = 0
        self.params = privacy
        if privacy is None:
            self.privacy: tuple[float, float] | None = None
            self.clip_norm: float | None = None
            self.mechanism: str | None = None
            self.iterations: int | None = None
            self.noise_std_: float | None = None
            self.gram = LocalGram(n_features)
        else:
            if iterations is None or iterations < 1:
                raise ValueError(
                    f"a private FedPower leaf needs iterations T >= 1, got {iterations}"
                )
            self.privacy = (privacy.epsilon, privacy.delta)
            self.clip_norm = privacy.clip_norm
            self.mechanism = privacy.mechanism
            self.iterations = int(iterations)
            self.noise_std_ = fedpower_noise_std(
                privacy.epsilon,
                privacy.delta,
                self.iterations,
                power_step_sensitivity(self.rank_),
            )
            self.gram = LocalGram(n_features, clip_norm=privacy.clip_norm)
        self.rng = np.random.default_rng(random_state)

    @property
    def last_noise_std_(self) -> float | None:
        """``sigma`` in unit-ball ``S Q`` units (what the status ledger reports)."""
        return self.noise_std_

    @property
    def budget_left(self) -> int | None:
        """Local iterations the budget still covers (None: not private)."""
        return None if self.iterations is None else self.iterations - self.n_releases_

    def iterate(self, z: np.ndarray, steps: int) -> np.ndarray:
        """``steps`` local iterations on ``A = S / n`` from ``z`` (noisy when private).

        Raises
        ------
        ValueError
            If the budget does not cover ``steps`` more iterations, or ``z`` does not fit.
        """
        left = self.budget_left
        if left is not None and steps > left:
            raise ValueError(
                f"privacy budget covers {left} more local iterations, round asks {steps}"
            )
        n = self.gram.n_samples
        sigma = 0.0 if self.noise_std_ is None or n == 0 else self.noise_std_ / n
        y = local_iterations(self.gram.matrix, z, steps, rng=self.rng, noise_std=sigma)
        self.n_releases_ += steps
        return y

    @property
    def n_samples_seen_(self) -> int:
        return self.gram.n_samples

    def partial_fit(self, rows: np.ndarray) -> GramEstimator:
        """Add rows ``(n, d)``; ValueError for a wrong width or a non-finite value."""
        before = self.gram.n_samples
        self.gram.add(rows)
        if self.clip_norm is not None and self.gram.n_samples > before:
            x = np.asarray(rows, dtype=np.float64).reshape(-1, self.n_features_)
            self.n_clipped_ += int(np.count_nonzero(np.linalg.norm(x, axis=1) > self.clip_norm))
        self.n_blocks_ += 1
        return self

    def flush(self) -> None:
        return None

    @property
    def tracked_subspace(self) -> Subspace:
        """``S`` as a full-rank subspace (eigenvalues clipped at 0, descending)."""
        values, vectors = np.linalg.eigh(self.gram.gram)
        order = np.argsort(values)[::-1]
        sv = np.sqrt(np.clip(values[order], 0.0, None))
        return Subspace(vectors[:, order], sv, self.gram.n_samples)

    @classmethod
    def from_subspace(cls, subspace: Subspace, rank: int) -> GramEstimator:
        """Rebuild ``S = U diag(sigma**2) U^T`` from a leaf's own full-rank snapshot."""
        basis = np.asarray(subspace.basis, dtype=np.float64)
        d = basis.shape[0]
        if basis.shape[1] != d:
            raise ValueError(f"snapshot has rank {basis.shape[1]}, a Gram needs {d}")
        q, _ = np.linalg.qr(basis)
        q *= np.sign(np.sum(q * basis, axis=0))  # the float32 basis, re-orthonormalised
        s = (q * np.asarray(subspace.singular_values) ** 2) @ q.T
        out = cls(d, rank)
        out.gram = LocalGram.from_state(
            {"gram": (s + s.T) / 2, "n_samples": int(subspace.n_samples), "clip_norm": None}
        )
        return out

    def get_state(self) -> dict[str, object]:
        """Checkpoint state (arrays and JSON values); a private one holds its guarantee
        and ledger (iterations run, readings clipped) too."""
        state: dict[str, object] = {
            "fedpower_gram": self.gram.gram.copy(),
            "fedpower_n": self.gram.n_samples,
            "fedpower_rank": self.rank_,
            "fedpower_blocks": self.n_blocks_,
            "fedpower_iterations_run": self.n_releases_,
            "fedpower_clipped": self.n_clipped_,
        }
        p = self.params
        if p is not None:
            state["fedpower_privacy"] = {
                "epsilon": p.epsilon,
                "delta": p.delta,
                "clip_norm": p.clip_norm,
                "mechanism": p.mechanism,
                "neighbours": p.neighbours,
                "iterations": self.iterations,
            }
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any], random_state: Any = None) -> GramEstimator:
        """Inverse of `get_state`; ValueError (one line) for a bad state."""
        if "fedpower_gram" not in state:
            raise ValueError("checkpoint holds no FedPower Gram (an FPCA leaf's checkpoint?)")
        gram = np.asarray(state["fedpower_gram"], dtype=np.float64)
        n = state["fedpower_n"]
        raw = state.get("fedpower_privacy")
        privacy, iterations = None, None
        if raw is not None:
            raw = dict(raw)
            iterations = int(raw.pop("iterations"))
            privacy = PrivacyParams(**raw)
        out = cls(
            gram.shape[0],
            int(state["fedpower_rank"]),
            privacy=privacy,
            iterations=iterations,
            random_state=random_state,
        )
        clip = None if privacy is None else privacy.clip_norm
        out.gram = LocalGram.from_state({"gram": gram, "n_samples": n, "clip_norm": clip})
        out.n_blocks_ = int(state.get("fedpower_blocks", 0))
        out.n_releases_ = int(state.get("fedpower_iterations_run", 0))
        out.n_clipped_ = int(state.get("fedpower_clipped", 0))
        return out


class FedPowerLeafCore(LeafCore):
    """A `LeafCore` whose estimator is a `GramEstimator`, answering the root's rounds.

    Attributes
    ----------
    round : RoundMessage or None
        The latest round received.
    replied_round : int
        The last round this process replied to (0: none).
    replies : int
        Replies made.
    """

    #: ``T``: local iterations a private leaf's budget covers (`configure`).
    iterations: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.round: RoundMessage | None = None
        self.replied_round = 0
        self.replies = 0
        self.budget_refusals = 0  # rounds not answered because the budget was spent
        super().__init__(*args, **kwargs)

    @classmethod
    @functools.cache
    def with_iterations(cls, iterations: int | None) -> type[FedPowerLeafCore]:
        """This class with ``T`` = ``iterations`` (a shell builds its core from a class)."""
        return type(cls.__name__, (cls,), {"iterations": iterations})

    def configure(self, fedpower: FedPowerConfig) -> None:
        """Take the topology's round settings: a private leaf's budget covers
        ``fedpower.total_iterations`` local iterations (the topology requires it bounded)."""
        self.iterations = fedpower.total_iterations

    @property
    def private(self) -> bool:
        """The leaf has a privacy guarantee (noisy iterations, no published Gram)."""
        return self.privacy is not None

    def cells(self) -> int:
        """Matrix cells a step touches: ``d**2`` (a Gram update, a local iteration on the
        dense ``S``), so the shell offloads a large Gram to a thread (`LeafCore.cells`)."""
        est = self.estimator
        return 0 if est is None else est.n_features_**2

    @staticmethod
    def estimator_from_state(  # type: ignore[override]
        state: Mapping[str, Any], random_state: Any = None
    ) -> GramEstimator:
        return GramEstimator.from_state(state, random_state=random_state)

    def new_estimator(self, n_features: int) -> GramEstimator:  # type: ignore[override]
        """A fresh `GramEstimator` (private with this leaf's guarantee and ``T``).

        Raises
        ------
        ValueError
            For a private leaf without ``T`` (`configure` not called, or an unbounded
            schedule).
        """
        if self.privacy is not None and self.iterations is None:
            raise ValueError("a private FedPower leaf needs a bounded schedule (fedpower_rounds)")
        return GramEstimator(
            n_features,
            self.config.rank,
            privacy=self.privacy,
            iterations=self.iterations,
            random_state=self.noise,
        )

    def privacy_mismatch(self, est: Any) -> str | None:
        """Another guarantee or another ``T`` in a checkpoint's estimator, or None."""
        params = getattr(est, "params", None)
        if params != self.privacy:
            return f"privacy {params}, configured {self.privacy}"
        if self.privacy is not None and est.iterations != self.iterations:
            return f"budget for {est.iterations} iterations, configured {self.iterations}"
        return None

    # A private leaf publishes no snapshot: its Gram is raw second-moment data.
    def snapshot_due(self, now: float) -> str | None:
        return None if self.private else super().snapshot_due(now)

    def make_snapshot(self, timestamp: float, reason: str) -> SubspaceMessage | None:
        return None if self.private else super().make_snapshot(timestamp, reason)

    def next_wakeup(self, now: float) -> float:
        if not self.private:
            return super().next_wakeup(now)
        return min(self.status_next(now), self.echo_next(), *self._other_wakeups(now))

    def restore_snapshot(self, msg: SubspaceMessage, now: float) -> str | None:
        """Continue from this leaf's own retained snapshot (its exact Gram, `GramEstimator`);
        never for a private leaf (it publishes none; an older one is not its guarantee)."""
        if self.private:
            return "privacy_mismatch"
        if msg.node_id != self.node_id or msg.n_samples == 0:
            return "empty"
        if msg.privacy is not None:
            return "privacy_mismatch"
        try:
            estimator = GramEstimator.from_subspace(msg.subspace, self.config.rank)
        except (ValueError, TypeError) as exc:
            return f"unusable: {exc}"
        self.estimator = estimator  # type: ignore[assignment]
        self.n_features = msg.n_features
        self.epoch, self.seq, self.snapshot = msg.epoch, msg.seq, msg
        self.sequencer.restore(msg.sources)
        self.durable = dict(msg.sources)
        self.restored_from = "retained snapshot"
        return None

    # ------------------------------------------------------------------ rounds
    def on_round(self, msg: RoundMessage, deployment: str | None) -> str | None:
        """Take a round message; a reject reason, or None."""
        if msg.deployment is not None and deployment is not None and msg.deployment != deployment:
            return "foreign_deployment"
        if msg.rank > (self.n_features or msg.rank):
            return "rank"
        if self.round is not None and msg.epoch != self.round.epoch:
            self.replied_round = 0  # a root that started over: its rounds count from 1 again
        self.round = msg
        return None

    def reply_due(self) -> bool:
        """A round is waiting for this leaf's reply, and the leaf has readings."""
        r = self.round
        return r is not None and r.round > self.replied_round and self.n_samples > 0

    @property
    def budget_exhausted(self) -> bool:
        """A private leaf whose budget does not cover another iteration."""
        est = self.estimator
        left = None if est is None else getattr(est, "budget_left", None)
        return left is not None and left <= 0

    def make_reply(self, timestamp: float, deployment: str | None) -> ReplyMessage | None:
        """Run the round's local iterations (numerics) and build the reply; None when a
        private leaf's budget does not cover the round's iterations (the round is then
        marked answered and counted in ``budget_refusals``).

        Raises
        ------
        ValueError
            If the round's basis does not fit the readings' width (the round is then
            marked answered, so it is not retried).
        """
        r = self.round
        est = self.estimator
        assert r is not None and est is not None
        self.replied_round = r.round
        left = est.budget_left  # type: ignore[attr-defined]
        if left is not None and r.local_steps > left:
            self.budget_refusals += 1
            return None
        z = r.start_basis(est.n_features_)
        y = est.iterate(z, r.local_steps)  # type: ignore[attr-defined]
        self.replies += 1
        if self.private and not self.checkpointing:
            # Without a checkpoint nothing restores a private leaf's readings; once a reply
            # has released them (spent their budget) they are confirmed, so the publishers
            # never replay them into a restarted leaf, where they would spend it again.
            self.durable = dict(self.ingested)
        return ReplyMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            round=r.round,
            y=y,
            n_samples=self.n_samples,
            timestamp=timestamp,
            privacy=self.privacy,
            sources=self.ingested,
            deployment=deployment,
        )

    def _other_wakeups(self, now: float) -> list[float]:
        times = super()._other_wakeups(now)
        if self.reply_due():
            times.append(now)
        return times

    def status_extra(self, now: float) -> dict[str, object]:
        extra = super().status_extra(now)
        extra["fedpower"] = {
            "round": None if self.round is None else self.round.round,
            "replied_round": self.replied_round,
            "replies": self.replies,
        }
        if self.private:
            est = self.estimator
            extra["fedpower"].update(  # type: ignore[attr-defined]
                {
                    "budget_iterations": self.iterations,
                    "iterations_run": 0 if est is None else est.n_releases_,
                    "budget_exhausted": self.budget_exhausted,
                    "budget_refusals": self.budget_refusals,
                }
            )
        return extra


class FedPowerRootCore(NodeCore):
    """The FedPower server of the runtime: rounds out, replies in, the global model out.

    Rounds. The next round starts ``round_interval_s`` after the previous one closed
    (``idle_interval_s`` once the estimate settled: the last round moved the basis by at
    most ``tolerance_rad`` and no participant had new readings), until ``rounds`` rounds
    (0: never stops). Every leaf is asked; a round closes with the first ``K`` replies or at
    ``round_timeout_s`` (`FedPowerServer`). Until a first reply tells the root the width
    ``d`` of the readings, round 1 carries no basis (the leaves start from `initial_basis`)
    and has no deadline: nothing can be learnt before a leaf has readings.

    The model of a closed round (with at least one reply) is a `SubspaceMessage`: the new
    global basis, ``seq`` = the round, ``n_samples`` and ``provenance`` = the participants'
    samples, and singular values estimated from the replies: the singular values ``l_j``
    of ``sum_l w_l Y_l D_l`` (the aligned, weighted replies, ``~ M Z``) give
    ``sigma_j = sqrt(n l_j)`` (exact at convergence with one local step).

    Parameters
    ----------
    node_id : str
        The root's name (``root`` of its round messages).
    leaves : sequence of str
        The ``M`` leaves asked every round.
    rank : int
        ``r``, columns of the global basis.
    config : FedPowerConfig
        The topology's round settings (quorum, timeouts, intervals, schedule, seed, OPT).
    status_policy : StatusPolicy
    now : float
        Monotonic seconds; every ``now`` argument is on this clock.
    deployment : str or None
        The topology's name: replies of another deployment are rejected.

    Raises
    ------
    ValueError
        From `FedPowerServer` once ``d`` is known, for a bad quorum or timeout.
    """

    def __init__(
        self,
        node_id: str,
        leaves: Sequence[str],
        rank: int,
        config: FedPowerConfig,
        *,
        status_policy: StatusPolicy,
        now: float,
        deployment: str | None = None,
    ) -> None:
        super().__init__(node_id, AGGREGATOR_PUBLISH, status_policy, 0.0, now)
        self.leaves = tuple(leaves)
        self.rank = rank
        self.config = config
        self.quorum = config.quorum_of(len(self.leaves))
        self.schedule = schedule_of(config)
        self.deployment = deployment
        self.epoch = secrets.token_hex(8)
        self.server: FedPowerServer | None = None
        self.round = 0  # the latest round started
        self.open = False
        self.opened_at = now
        self.next_start = now
        self.round_message: RoundMessage | None = None
        self.model: SubspaceMessage | None = None
        self.last_angle: float | None = None
        self.settled = False
        self.rounds_closed = 0
        self.restored_from: str | None = None
        self._last_counts: dict[str, int] = {}
        self.guarantees: dict[str, PrivacyParams | None] = {}  # every leaf that replied
        self.last_participants: tuple[str, ...] = ()
        self._early_late = 0  # late replies while round 1 had no basis (no server yet)
        self.settle_status()

    # ------------------------------------------------------------------ state
    @property
    def done(self) -> bool:
        """The configured number of rounds closed (never when open-ended)."""
        return self.config.rounds > 0 and self.round >= self.config.rounds and not self.open

    @property
    def late_replies(self) -> int:
        """Replies dropped as late (the server's count plus those before it existed)."""
        return 0 if self.server is None else self.server.late_replies + self._early_late

    def _new_server(self, basis: np.ndarray, round_no: int) -> FedPowerServer:
        server = FedPowerServer(
            self.leaves,
            basis,
            self.schedule,
            quorum=self.quorum,
            round_timeout=self.config.round_timeout_s,
            opt=self.config.opt,
        )
        server.round = round_no
        return server

    def restore(self, msg: RoundMessage) -> bool:
        """Continue after the root's own retained round message (a restart): the next round
        is ``msg.round + 1`` from its basis. False if the message is not this root's."""
        if msg.root != self.node_id or msg.rank != self.rank:
            return False
        if self.deployment is not None and msg.deployment not in (None, self.deployment):
            return False
        self.epoch = msg.epoch
        self.round = msg.round
        if msg.basis is not None:
            self.server = self._new_server(msg.basis, msg.round)
        self.restored_from = "retained round"
        return True

    # ------------------------------------------------------------------ rounds
    def round_due(self, now: float, timestamp: float) -> RoundMessage | None:
        """The round to start (and publish, retained) now, or None."""
        if self.open or self.done or now < self.next_start:
            return None
        if self.server is None:
            self.round += 1
            basis, steps = None, self.schedule.local_steps(self.round)
        else:
            start = self.server.start_round(now)
            self.round = start.round
            basis, steps = start.basis, start.local_steps
        self.open, self.opened_at = True, now
        self.round_message = RoundMessage(
            root=self.node_id,
            epoch=self.epoch,
            round=self.round,
            rank=self.rank,
            basis=basis,
            local_steps=steps,
            timeout_s=self.config.round_timeout_s,
            seed=self.config.seed,
            timestamp=timestamp,
            deployment=self.deployment,
        )
        return self.round_message

    def offer(self, reply: ReplyMessage, now: float) -> str | None:
        """A leaf's reply: None when counted; ``"late"``, ``"duplicate"``, ``"unasked"``
        when dropped (counted by the server, not a reject); else a reject reason."""
        if (
            reply.deployment is not None
            and self.deployment is not None
            and reply.deployment != self.deployment
        ):
            return "foreign_deployment"
        if reply.node_id not in self.leaves:
            return "unknown_leaf"
        if reply.rank != self.rank:
            return "rank"
        if reply.round > self.round:
            return "round"
        if self.server is None:  # round 1 without a basis: this reply fixes d
            if not self.open or reply.round < self.round:
                self._early_late += 1
                return "late"
            z0 = initial_basis(self.config.seed, reply.n_features, self.rank)
            self.server = self._new_server(z0, self.round - 1)
            self.server.start_round(self.opened_at)
        if reply.n_features != self.server.n_features:
            return "n_features"
        if not np.isfinite(reply.y).all():  # the wire refuses it; a core never trusts that
            return "non_finite"
        server = self.server
        before = (server.late_replies, server.duplicate_replies, server.unasked_replies)
        try:
            accepted = server.offer(reply.node_id, reply.round, reply.y, reply.n_samples)
        except ValueError:
            return "round"
        if accepted:
            self.guarantees[reply.node_id] = reply.privacy
            return None
        after = (server.late_replies, server.duplicate_replies, server.unasked_replies)
        return ("late", "duplicate", "unasked")[next(i for i in range(3) if after[i] != before[i])]

    def close_due(self, now: float) -> bool:
        """The open round should close (quorum or deadline; never before ``d`` is known)."""
        return self.open and self.server is not None and self.server.close_due(now)

    def cells(self) -> int:
        """Matrix cells closing the open round touches, ``d r (replies + 1)`` (the shell
        runs large closes in a worker thread, as `LeafCore.cells`)."""
        server = self.server
        return 0 if server is None else server.n_features * server.rank * (server.replies + 1)

    def close(self, now: float, timestamp: float) -> SubspaceMessage | None:
        """Close the open round; the model to publish, or None when nobody replied."""
        server = self.server
        assert server is not None and self.open
        previous = server.basis
        replies = server.pending
        basis = server.close_round(now)
        record = server.history[-1]
        self.open = False
        self.rounds_closed += 1
        self.last_participants = record.replied
        if not replies:
            self.next_start = now + self.config.round_interval_s
            return None
        angle = largest_angle(previous, basis)
        counts = {leaf: n for leaf, (_, n) in replies.items()}
        same = all(self._last_counts.get(leaf) == n for leaf, n in counts.items())
        self.settled = angle <= self.config.tolerance_rad and same
        self._last_counts.update(counts)
        self.last_angle = angle
        wait = self.config.idle_interval_s if self.settled else self.config.round_interval_s
        self.next_start = now + wait
        n_total = sum(counts.values())
        sv = self._singular_values(replies, previous, n_total)
        self.model = SubspaceMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            seq=record.round,
            subspace=Subspace(np.array(basis), sv, n_total),
            timestamp=timestamp,
            privacy=self.privacy,
            provenance=counts,
            deployment=self.deployment,
        )
        return self.model

    @property
    def privacy(self) -> PrivacyParams | None:
        """The model's guarantee: the weakest of every leaf whose replies shaped the basis
        (all rounds since this process started, `weakest_guarantee`); None if one of them
        replied without noise. The basis of a round depends on every earlier round's
        replies, so the leaves of earlier rounds count too."""
        return weakest_guarantee(list(self.guarantees.values()))

    def _singular_values(
        self, replies: Mapping[str, tuple[np.ndarray, int]], reference: np.ndarray, n: int
    ) -> np.ndarray:
        total = np.zeros_like(reference)
        for y, count in replies.values():
            rotation = procrustes_rotation(y, reference) if self.config.opt else np.eye(y.shape[1])
            total += (count / n) * (y @ rotation)
        values = np.linalg.svd(total, compute_uv=False)
        return np.sort(np.sqrt(np.clip(values, 0.0, None) * n))[::-1]

    def next_wakeup(self, now: float) -> float:
        """The next round start, round deadline or status document, seconds."""
        return min(self.status_next(now), *self._other_wakeups(now), now + 1.0)

    def _other_wakeups(self, now: float) -> list[float]:
        if self.open:
            if self.server is None:
                return []
            return [self.opened_at + self.config.round_timeout_s]
        return [] if self.done else [self.next_start]

    def status_extra(self, now: float) -> dict[str, object]:
        server = self.server
        return {
            "algorithm": "fedpower",
            "round": self.round,
            "round_open": self.open,
            "rounds_closed": self.rounds_closed,
            "quorum": self.quorum,
            "participants": list(self.last_participants),
            "late_replies": self.late_replies,
            "duplicate_replies": 0 if server is None else server.duplicate_replies,
            "unasked_replies": 0 if server is None else server.unasked_replies,
            "timeouts": 0 if server is None else server.timeouts,
            "last_angle_rad": self.last_angle,
            "settled": self.settled,
            "restored_from": self.restored_from,
        }
