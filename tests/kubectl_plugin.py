"""Running ``kubectl runnerpool`` in tests: in-process with its streams captured, as a user would
type it (kubeconfig, namespace, the fake GitHub's URL as the operator's default API)."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from runnerpool.plugin.main import run


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def both(self) -> str:
        return self.out + self.err

    def rows(self) -> list[list[str]]:
        """The printed table's lines split into cells (columns are three or more spaces apart)."""
        return [re.split(r" {3,}", line.strip()) for line in self.out.splitlines() if line.strip()]


@dataclass(frozen=True)
class Plugin:
    kubeconfig: Path
    namespace: str
    github_api_url: str

    def __call__(
        self, *args: str, stdin: str = "", kubeconfig: Path | None = None, github_api_url: str | None = None
    ) -> Ran:
        out, err = io.StringIO(), io.StringIO()
        argv = [
            *args,
            "--kubeconfig",
            str(kubeconfig or self.kubeconfig),
            "-n",
            self.namespace,
            "--github-api-url",
            github_api_url or self.github_api_url,
        ]
        code = run(argv, out=out, err=err, stdin=io.StringIO(stdin))
        return Ran(code, out.getvalue(), err.getvalue())
