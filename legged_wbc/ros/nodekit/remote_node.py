"""Another process's node, seen through its parameter services (``rcl_interfaces``) and ``/parameter_events``.

:class:`RemoteNode` offers the part of rclpy's ``Node`` parameter API a parameter front end needs
(``get_fully_qualified_name``, ``get_parameters_by_prefix``, ``has_parameter``, ``get_parameter``,
``set_parameters``, ``add_post_set_parameters_callback``), so the Foxglove live view of the simulation part
of ``layout:=split`` serves the estimator's and the controller's parameters, which live in the control part,
as it serves its own part's. A set goes through the remote node's ``SetParameters`` service: its declared
types, ranges and its own validation decide, exactly as for ``legged-wbc param set``.

A call blocks its caller (never the executor's thread: the answers arrive through the local node's
executor, which must be spinning in another thread) for at most ``timeout_s``; a node that does not answer
raises :class:`TimeoutError`. Values are cached from the last listing and kept current by the remote node's
parameter events (any source: Foxglove, ``legged-wbc param set``, a node's own change).
"""

from __future__ import annotations

import threading


class RemoteNode:
    """Node ``fqn`` (``/state_estimator``) reached from ``local`` (a node spun by an executor thread)."""

    def __init__(self, local, fqn: str, timeout_s: float = 1.0):
        from rclpy.parameter_client import AsyncParameterClient

        self.local, self.fqn, self.timeout_s = local, fqn, float(timeout_s)
        self.client = AsyncParameterClient(local, fqn)
        self._cache: dict = {}                # parameter name -> rclpy Parameter
        self._callbacks: list = []
        self.client.on_parameter_event(self._on_event)

    def get_fully_qualified_name(self) -> str:
        return self.fqn

    def _wait(self, future):
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(self.timeout_s):
            future.cancel()
            raise TimeoutError(f"{self.fqn}: no answer from its parameter services within {self.timeout_s:g} s")
        return future.result()

    def refresh(self) -> None:
        """Every parameter's value, asked again (list, then get)."""
        from rcl_interfaces.msg import Parameter as ParameterMsg
        from rclpy.parameter import Parameter

        names = list(self._wait(self.client.list_parameters()).result.names)
        values = self._wait(self.client.get_parameters(names)).values if names else []
        self._cache = {n: Parameter.from_parameter_msg(ParameterMsg(name=n, value=v)) for n, v in zip(names, values)}

    def get_parameters_by_prefix(self, prefix: str) -> dict:
        """``{name: Parameter}`` of the parameters whose names start with ``prefix`` (asked again; the cached
        values if the node does not answer)."""
        try:
            self.refresh()
        except TimeoutError:
            pass
        return {n: p for n, p in self._cache.items() if n.startswith(prefix)}

    def has_parameter(self, name: str) -> bool:
        if name not in self._cache:
            try:
                self.refresh()
            except TimeoutError:
                return False
        return name in self._cache

    def get_parameter(self, name: str):
        return self._cache[name]

    def set_parameters(self, params: list) -> list:
        """The remote node's ``SetParametersResult`` of each (``successful``, ``reason``); a node that does
        not answer: one failed result each, saying so."""
        from rcl_interfaces.msg import SetParametersResult

        try:
            return list(self._wait(self.client.set_parameters(params)).results)
        except TimeoutError as exc:
            return [SetParametersResult(successful=False, reason=str(exc)) for _ in params]

    def add_post_set_parameters_callback(self, callback) -> None:
        """``callback(params)`` with the parameters the remote node changed (its parameter events)."""
        self._callbacks.append(callback)

    def _on_event(self, event) -> None:
        if event.node != self.fqn:
            return
        from rclpy.parameter import Parameter

        changed = [Parameter.from_parameter_msg(p) for p in (*event.new_parameters, *event.changed_parameters)]
        for p in changed:
            self._cache[p.name] = p
        if changed:
            for cb in self._callbacks:
                cb(changed)
