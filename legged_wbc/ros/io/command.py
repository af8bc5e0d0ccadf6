"""The torque command's receiver side: validation and decoding of ``/joint_torque_cmd``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from legged_wbc.conventions import CONTROL_PERIOD_NS, UNTIMED_TICK
from legged_wbc.ros.io.stamps import stamp_ns


# ----------------------------------------------------------------------------- torque command
class CommandError(ValueError):
    """A torque command that must not be applied; the message is the reason, ``kind`` its category
    (``length``, ``tick``, ``nonfinite``)."""

    def __init__(self, reason: str, kind: str = "invalid"):
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True)
class TorqueCommand:
    tick: int              # control tick it answers (UNTIMED_TICK = -1: untimed)
    tau: np.ndarray        # [N m], in the receiver's joint order
    stamp_ns: int | None = None   # untimed: the stamp (of the sample it answers), for latency bookkeeping


class TorqueCommandDecoder:
    """Validates and decodes ``/joint_torque_cmd`` for a receiver with joints ``joint_names``.

    ``decode(msg)`` returns a :class:`TorqueCommand` with the torques in ``joint_names`` order and the
    tick the stamp names (``stamp / control_period``), or raises :class:`CommandError` with a reason
    and a ``kind``: ``names`` (not every joint exactly once, or a name the receiver does not have),
    ``length`` (``effort`` not one value per name), ``nonfinite``, ``tick`` (a stamp between two
    control ticks). With ``timed=False`` (a hardware-style input, e.g. a controller that does not
    know the bridge's ticks) the stamp is ignored and every command is untimed (``tick = -1``).
    The joints may come in any order; the order of the first message is remembered, so the usual
    case (the same order every time) costs one list comparison.
    """

    def __init__(self, joint_names: Sequence[str], control_period_ns: int = CONTROL_PERIOD_NS, timed: bool = True):
        self.names = list(joint_names)
        self.n = len(self.names)
        self._index = {nm: i for i, nm in enumerate(self.names)}
        self.period_ns = int(control_period_ns)
        self.timed = bool(timed)
        self._last_names: list[str] | None = None
        self._perm: np.ndarray | None = None     # receiver index of each message entry (None: same order)

    def _order(self, names) -> np.ndarray | None:
        if names == self._last_names:      # the usual case: the same order as the previous command
            return self._perm
        names = list(names)
        if names == self.names:
            perm = None
        else:
            unknown = [nm for nm in names if nm not in self._index]
            if unknown or len(names) != self.n or len(set(names)) != self.n:
                missing = sorted(set(self.names) - set(names))
                dup = sorted({nm for nm in names if names.count(nm) > 1})
                raise CommandError(f"joint names must be each of the {self.n} joints once (unknown {unknown[:3]}, "
                                   f"missing {missing[:3]}, duplicate {dup[:3]})", "names")
            perm = np.array([self._index[nm] for nm in names])
        self._last_names, self._perm = names, perm
        return perm

    def decode(self, msg) -> TorqueCommand:
        return self.decode_fields(stamp_ns(msg.header.stamp), msg.name, msg.effort)

    def decode_fields(self, t_ns: int, names, effort) -> TorqueCommand:
        """:meth:`decode` of a command's stamp [ns], names and efforts (e.g. an adapted value)."""
        tick, stamp = UNTIMED_TICK, None
        if not self.timed:
            stamp = t_ns
        else:
            tick, rem = divmod(t_ns, self.period_ns)
            if rem:
                raise CommandError(f"stamp {t_ns * 1e-9:.6f} s is not a control tick (a multiple of "
                                   f"{self.period_ns * 1e-9:g} s); answer the stamp of the tick's sensor sample", "tick")
        try:
            perm = self._order(names)
        except CommandError as exc:
            raise CommandError(f"{exc} (tick {tick})", exc.kind) from None
        eff = np.array(effort, dtype=float)         # a copy: the sender may reuse its array
        if eff.shape != (self.n,):
            raise CommandError(f"expected {self.n} efforts (one per name), got {eff.size} (tick {tick})", "length")
        if not np.isfinite(eff).all():
            names = [names[i] for i in np.flatnonzero(~np.isfinite(eff))[:3]]
            raise CommandError(f"non-finite effort for joint(s) {names} (tick {tick})", "nonfinite")
        if perm is None:
            return TorqueCommand(tick=int(tick), tau=eff, stamp_ns=stamp)
        tau = np.empty(self.n)
        tau[perm] = eff
        return TorqueCommand(tick=int(tick), tau=tau, stamp_ns=stamp)
