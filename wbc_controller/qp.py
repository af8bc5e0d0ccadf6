"""Fixed-size QP container, solver backends with persistent workspaces, and solution checks.

Problem form (dense, sizes fixed for the life of a controller)::

    minimize    1/2 x^T H x + g^T x
    subject to  A_eq x = b_eq
                l <= C x <= u          (rows with |bound| >= INF are loose)

Backends keep their workspace between calls (``daqp.Model``, ProxQP dense ``QP`` with warm start,
OSQP with a fixed dense sparsity pattern and ``update``). :class:`QpsolversBackend` rebuilds the
problem every call through ``qpsolvers.solve_qp``: the reference path for tests and benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INF = 1e20


class QpProblem:
    """Preallocated QP matrices, filled in place each control cycle.

    The constraint rows are stored stacked, as a dual active-set solver takes them:
    ``A = [A_eq; C]`` (``A_eq``, ``C`` are views of it), upper bounds ``bu = [b_eq; u]`` (``b_eq``,
    ``u`` views) and lower bounds ``bl = [b_eq; l]`` (``l`` a view; its first ``n_eq`` entries are
    refreshed from ``b_eq`` by :meth:`stacked_bounds`)."""

    def __init__(self, n: int, n_eq: int, n_in: int):
        self.n, self.n_eq, self.n_in = n, n_eq, n_in
        self.H = np.zeros((n, n))
        self.g = np.zeros(n)
        self.A = np.zeros((n_eq + n_in, n))
        self.A_eq = self.A[:n_eq]
        self.C = self.A[n_eq:]
        self.bu = np.concatenate([np.zeros(n_eq), np.full(n_in, INF)])
        self.bl = np.concatenate([np.zeros(n_eq), np.full(n_in, -INF)])
        self.b_eq = self.bu[:n_eq]
        self.u = self.bu[n_eq:]
        self.l = self.bl[n_eq:]

    def stacked_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(bu, bl) = ([b_eq; u], [b_eq; l])`` over the problem's own storage."""
        self.bl[:self.n_eq] = self.b_eq
        return self.bu, self.bl

    def copy(self) -> "QpProblem":
        out = QpProblem(self.n, self.n_eq, self.n_in)
        for k in ("H", "g", "A", "bu", "bl"):   # A_eq, C, b_eq, u, l are views of these
            getattr(out, k)[...] = getattr(self, k)
        return out

    def residuals(self, x: np.ndarray) -> tuple[float, float]:
        """(normalized equality residual, normalized inequality violation) at ``x``.

        Each row's error is divided by ``max(1, |its bound|)`` (loose rows ignored)."""
        r_eq = np.abs(self.A_eq @ x - self.b_eq) / np.maximum(1.0, np.abs(self.b_eq))
        Cx = self.C @ x
        lo = np.where(self.l > -INF, (self.l - Cx) / np.maximum(1.0, np.abs(self.l)), 0.0)
        hi = np.where(self.u < INF, (Cx - self.u) / np.maximum(1.0, np.abs(self.u)), 0.0)
        viol = max(0.0, float(lo.max(initial=0.0)), float(hi.max(initial=0.0)))
        return float(r_eq.max(initial=0.0)), viol

    def objective(self, x: np.ndarray) -> float:
        return float(0.5 * x @ self.H @ x + self.g @ x)


@dataclass
class QpResult:
    x: np.ndarray
    optimal: bool
    status: str
    iterations: int


class Backend:
    name = "base"

    def __init__(self, n: int, n_eq: int, n_in: int, tol: float = 1e-6, max_iter: int = 200):
        self.n, self.n_eq, self.n_in, self.tol, self.max_iter = n, n_eq, n_in, tol, max_iter

    def solve(self, p: QpProblem) -> QpResult:  # pragma: no cover - interface
        raise NotImplementedError


class DaqpBackend(Backend):
    """DAQP (dual active set) with a persistent ``daqp.Model`` workspace; the previous active set
    is the warm start of the next solve."""

    name = "daqp"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        import daqp

        self._daqp = daqp
        self.model = None
        self.sense = np.zeros(self.n_eq + self.n_in, dtype=np.int32)
        self.sense[: self.n_eq] = 5  # equality

    def solve(self, p: QpProblem) -> QpResult:
        # the problem's stacked storage is passed as is (no copies); the same numbers either way
        A = p.A
        bu, bl = p.stacked_bounds()
        if self.model is None:
            self.model = self._daqp.Model()
            self.model.setup(p.H, p.g, A, bu, bl, self.sense)
            self.model.settings = {"primal_tol": self.tol, "dual_tol": self.tol, "iter_limit": self.max_iter}
        else:
            self.model.update(H=p.H, f=p.g, A=A, bupper=bu, blower=bl)
        x, _, flag, info = self.model.solve()
        return QpResult(np.array(x), flag == 1, f"daqp exitflag {flag}", int(info.get("iterations", 0)))


_STATUS = {k: f"daqp exitflag {k}" for k in range(-10, 3)}


class LdpProblem:
    """A QP in least-distance form, as DAQP solves it: ``minimize 1/2 ||y||^2 + c^T y`` subject to
    ``bl[:ms] <= y[:ms] <= bu[:ms]`` (simple bounds) and ``bl[ms:] <= A y <= bu[ms:]`` whose first
    ``n_eq`` rows are equalities (their two bounds equal). Filled in place each cycle
    (:func:`wbc_controller.kernels.ldp_from_qp`)."""

    def __init__(self, n: int, ms: int, m_a: int, n_eq: int):
        self.n, self.ms, self.m_a, self.n_eq = n, ms, m_a, n_eq
        self.c = np.zeros(n)
        self.A = np.zeros((m_a, n))
        self.bu = np.full(ms + m_a, INF)
        self.bl = np.full(ms + m_a, -INF)


class DaqpLdpBackend:
    """DAQP on an :class:`LdpProblem`: set up once with ``H = I`` (DAQP's LDP transform is then a
    copy), updated with ``c``, ``A`` and the bounds every cycle. The workspace keeps the previous
    solution's active set as the start of the next solve (DAQP re-factorizes it for the new rows)."""

    name = "daqp-ldp"

    def __init__(self, n: int, ms: int, m_a: int, n_eq: int, tol: float = 1e-6, max_iter: int = 200):
        import daqp

        self._daqp = daqp
        self.n, self.ms, self.m_a, self.n_eq, self.tol, self.max_iter = n, ms, m_a, n_eq, tol, max_iter
        self.model = None
        self.sense = np.zeros(ms + m_a, dtype=np.int32)
        self.sense[ms:ms + n_eq] = 5  # equality
        self._eye = np.eye(n)

    def solve(self, p: LdpProblem) -> QpResult:
        if self.model is None:
            self.model = self._daqp.Model()
            self.model.settings = {"primal_tol": self.tol, "dual_tol": self.tol, "iter_limit": self.max_iter}
            flag, _ = self.model.setup(self._eye, p.c, p.A, p.bu, p.bl, self.sense)
            if flag < 0:   # e.g. contradictory bounds: no workspace, set up again next cycle
                self.model = None
                return QpResult(np.zeros(self.n), False, f"daqp exitflag {flag}", 0)
        else:
            flag = self.model.update(None, p.c, p.A, p.bu, p.bl)   # (H, f, A, bupper, blower): H stays I
            if flag < 0:   # DAQP keeps the update pending and forms it again with the next one
                return QpResult(np.zeros(self.n), False, f"daqp exitflag {flag}", 0)
        y, _, flag, info = self.model.solve()
        return QpResult(y, flag == 1, _STATUS.get(flag) or f"daqp exitflag {flag}", info["iterations"])


class ProxqpBackend(Backend):
    """ProxQP dense with a persistent workspace, warm-started from the previous solution."""

    name = "proxqp"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        from proxsuite import proxqp

        self._proxqp = proxqp
        self.qp = proxqp.dense.QP(self.n, self.n_eq, self.n_in)
        self.qp.settings.eps_abs = self.tol
        self.qp.settings.eps_rel = 0.0
        self.qp.settings.max_iter = max(self.max_iter, 100)
        self.qp.settings.verbose = False
        self.initialized = False

    def solve(self, p: QpProblem) -> QpResult:
        if not self.initialized:
            self.qp.settings.initial_guess = self._proxqp.InitialGuess.WARM_START_WITH_PREVIOUS_RESULT
            self.qp.init(p.H, p.g, p.A_eq, p.b_eq, p.C, p.l, p.u)
            self.initialized = True
        else:
            self.qp.update(p.H, p.g, p.A_eq, p.b_eq, p.C, p.l, p.u)
        self.qp.solve()
        info = self.qp.results.info
        ok = info.status == self._proxqp.QPSolverOutput.PROXQP_SOLVED
        return QpResult(self.qp.results.x.copy(), bool(ok), str(info.status), int(info.iter))


class OsqpBackend(Backend):
    """OSQP with a fixed dense sparsity pattern, updated in place (``update(Px, q, Ax, l, u)``) and
    warm-started; polishing on for accurate active constraints."""

    name = "osqp"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        import osqp
        import scipy.sparse as sp

        self._osqp, self._sp = osqp, sp
        n, m = self.n, self.n_eq + self.n_in
        self.P_pattern = sp.csc_matrix(np.triu(np.ones((n, n))))
        self.A_pattern = sp.csc_matrix(np.ones((m, n)))
        self.solver = None
        self.lo = np.zeros(m)
        self.hi = np.zeros(m)
        self.A = np.zeros((m, n))

    def solve(self, p: QpProblem) -> QpResult:
        ne = self.n_eq
        self.A[:ne] = p.A_eq
        self.A[ne:] = p.C
        self.lo[:ne] = p.b_eq
        self.hi[:ne] = p.b_eq
        self.lo[ne:] = p.l
        self.hi[ne:] = p.u
        # CSC data of a dense pattern is column-major
        Px = self._triu_csc_data(p.H)
        Ax = self.A.T.reshape(-1)
        if self.solver is None:
            self.solver = self._osqp.OSQP()
            P = self.P_pattern.copy()
            P.data[:] = Px
            A = self.A_pattern.copy()
            A.data[:] = Ax
            self.solver.setup(P, p.g, A, self.lo, self.hi, eps_abs=self.tol, eps_rel=self.tol, max_iter=4000,
                              polishing=True, verbose=False, warm_starting=True)
        else:
            self.solver.update(Px=Px, Ax=Ax, q=p.g, l=self.lo, u=self.hi)
        res = self.solver.solve()
        status = res.info.status
        return QpResult(np.array(res.x), status == "solved", f"osqp {status}", int(res.info.iter))

    def _triu_csc_data(self, H: np.ndarray) -> np.ndarray:
        # upper triangle in CSC order: column j holds rows 0..j
        n = self.n
        if not hasattr(self, "_triu_cols"):
            rows, cols = [], []
            for j in range(n):
                rows.extend(range(j + 1))
                cols.extend([j] * (j + 1))
            self._triu_rows, self._triu_cols = np.array(rows), np.array(cols)
        return H[self._triu_rows, self._triu_cols]


class QpsolversBackend(Backend):
    """Reference path: ``qpsolvers.solve_qp`` rebuilding the problem every call (slow)."""

    def __init__(self, *a, solver: str = "osqp", **kw):
        super().__init__(*a, **kw)
        self.solver = solver
        self.name = f"qpsolvers-{solver}"

    def solve(self, p: QpProblem) -> QpResult:
        import qpsolvers

        finite_u = p.u < INF
        finite_l = p.l > -INF
        G = np.vstack([p.C[finite_u], -p.C[finite_l]])
        h = np.concatenate([p.u[finite_u], -p.l[finite_l]])
        kw = {}
        if self.solver == "osqp":
            kw = dict(eps_abs=self.tol, eps_rel=self.tol, max_iter=20000, polishing=True)
        x = qpsolvers.solve_qp(p.H, p.g, G, h, p.A_eq, p.b_eq, solver=self.solver, **kw)
        if x is None:
            return QpResult(np.zeros(self.n), False, "no solution", 0)
        return QpResult(np.asarray(x), True, "solved", 0)


BACKENDS = {"daqp": DaqpBackend, "proxqp": ProxqpBackend, "osqp": OsqpBackend}


def make_backend(name: str, n: int, n_eq: int, n_in: int, tol: float = 1e-6, max_iter: int = 200) -> Backend:
    if name.startswith("qpsolvers-"):
        return QpsolversBackend(n, n_eq, n_in, tol=tol, max_iter=max_iter, solver=name.split("-", 1)[1])
    try:
        return BACKENDS[name](n, n_eq, n_in, tol=tol, max_iter=max_iter)
    except KeyError:
        raise ValueError(f"unknown QP backend {name!r}; choose from {sorted(BACKENDS)}") from None

