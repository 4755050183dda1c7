"""Progress of long steps (loading, index builds, the sweep), on stderr."""
import sys
import time


class Progress:
    """A one-line progress meter on stderr: rewritten in place on a terminal, a line
    every few seconds otherwise (logs of a device run)."""

    def __init__(self, label, total=None, unit="", scale=1.0):
        self.label, self.total, self.unit, self.scale = label, total, unit, scale
        self.start = time.monotonic()
        self.last_print = 0.0
        self.tty = sys.stderr.isatty()

    def elapsed(self):
        return time.monotonic() - self.start

    def update(self, done, detail=""):
        now = time.monotonic()
        if now - self.last_print < (0.2 if self.tty else 5.0):
            return
        self.last_print = now
        self._show(done, detail)

    def _show(self, done, detail, end=""):
        text = "  %s: " % self.label
        if done is not None and self.total:
            text += "%.1f/%.1f %s (%3.0f%%) " % (done * self.scale, self.total * self.scale,
                                                self.unit, 100.0 * done / self.total)
        text += "%s [%.0f s]" % (detail, self.elapsed())
        if self.tty:
            sys.stderr.write("\r\033[K" + text + end)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def finish(self, detail="done"):
        self._show(self.total, detail, end="\n" if self.tty else "")
