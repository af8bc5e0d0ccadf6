"""A stand-in for a node's logger that keeps its lines (``(level, text)``), for tests of fail-soft helpers."""


class Log:
    def __init__(self):
        self.lines = []

    def info(self, m):
        self.lines.append(("info", m))

    def warning(self, m):
        self.lines.append(("warning", m))
