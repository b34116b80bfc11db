"""The report folders regenerated as runs are exported (in a thread of their own), and those left out of date."""

from __future__ import annotations

import functools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness.campaign.locks import results_lock
from harness.campaign.text import ROOT, one_line, shown
from harness.process import die_with_parent

SCORECARD_PRESETS = "scorecard_"  # presets of the scorecard's suites (harness.scorecard): no report of the campaign's
STALE_REPORTS = ".stale-reports.json"  # under --results: report folders out of date (a failed report, a stopped runner)


def report(preset: str, results: Path) -> list[str]:
    """Regenerate the tables and figures of ``preset`` and of every preset whose report reads its runs
    (``report_sources``: shared runs, and variant presets such as beyond_relapse_skip of beyond_relapse), from
    everything under results/runs. Each folder shows its own tables and figures only (``report_specs``), whatever
    other runs it reads. A variant preset with no table or figure of its own gets no report folder. Returns the
    report folders that failed, each named in one line (``REPORT FAILED``) with the report's last error line."""
    if preset.startswith(SCORECARD_PRESETS):  # read by python -m harness.scorecard, which writes its own report
        return []
    owners, targets = _report_targets(preset)
    with results_lock(results):
        failed = [target for target in targets if not _regenerate(target, preset, owners, results)]
        regenerated = [target for target in targets if target not in failed]
        # the preset itself, noted when its runs were exported, is up to date once every report reading them is
        note_stale_reports(results, add=failed, done=regenerated + ([] if failed else [preset]))
    for target in regenerated:
        try:  # a check that fails leaves the report it follows regenerated: said, not counted as a report failure
            conclusions_left_behind(target, results)
        except Exception as error:  # noqa: BLE001 - any error of the checker, named in its one line
            print(f"{time.strftime('%H:%M:%S')} CONCLUSIONS NOT CHECKED {target}: {type(error).__name__}: "
                  f"{one_line(error)}; python -m harness.report.quotes {shown(results)} --rerun {target} "
                  "checks them", flush=True)
    return failed


def conclusions_left_behind(target: str, results: Path) -> int:
    """Say, a line each (``CONCLUSIONS BEHIND``), what of ``target``'s hand-written ``conclusions.md`` its new
    report no longer backs: numbers its tables no longer give, and tables their ``computed by`` command no longer
    prints (``harness.report.quotes``); the number of such findings. The conclusions are the author's to update: the
    campaign only points at them."""
    from harness.report import quotes

    path = results / target / "conclusions.md"
    if not path.is_file():
        return 0
    found = [f"{shown(q.file)}:{q.line}: {q.text} (column {q.column!r}) is in no generated table"
             for q in quotes.check_file(path).unmatched]
    stale, _ = quotes.rerun(results, [target])
    found += [f"{shown(table.file)}:{table.line}: not what `{table.command}` prints now: {table.why}"
              for table in stale]
    for line in found:
        print(f"{time.strftime('%H:%M:%S')} CONCLUSIONS BEHIND {line}", flush=True)
    if found:
        print(f"{time.strftime('%H:%M:%S')} CONCLUSIONS BEHIND: update {shown(path)}; python -m harness.report.quotes "
              f"{shown(results)} --rerun {target} checks it again", flush=True)
    return len(found)


def _report_targets(preset: str) -> tuple[set[str], list[str]]:
    """(The presets that own a table or figure, the report folders ``preset``'s runs feed): its own, unless it owns
    none and others read its runs, and every other preset whose report reads them."""
    from harness.report.specs import FIGURES, TABLES, report_sources

    owners = {spec.preset for spec in TABLES.values()} | {p.preset for f in FIGURES.values() for p in f.panels}
    readers = [name for name in owners if name != preset and preset in report_sources(name)]
    return owners, ([preset] if preset in owners or not readers else []) + sorted(readers)


def _regenerate(target: str, preset: str, owners: set[str], results: Path) -> bool:
    """Write ``target``'s report folder from the runs it reads (for ``preset``'s new runs); False, said in one line
    (``REPORT FAILED``), when the report fails."""
    from harness.report.specs import report_sources, report_specs

    sources = [results / "runs" / name for name in report_sources(target)]
    chosen = []
    if target in owners:  # its own tables and figures only, not those of the runs it shares
        tables, figures = report_specs(target)
        chosen = ["--tables", ",".join(tables) or "none", "--figures", ",".join(figures) or "generic"]
    command = [sys.executable, "-m", "harness.report", *map(shown, filter(Path.exists, sources)),
               "--out", shown(results / target), *chosen]
    try:
        done = subprocess.run(command, cwd=ROOT, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, errors="replace",  # ends with a stopped runner (its stale note stays)
                              preexec_fn=functools.partial(die_with_parent, os.getpid()))
        code, said = done.returncode, done.stderr or ""
    except OSError as error:
        code, said = None, str(error)
    if code != 0:
        last = next((line.strip() for line in reversed(said.splitlines()) if line.strip()), "no message")
        print(f"{time.strftime('%H:%M:%S')} REPORT FAILED {target} (for {preset}; exit {code}): {last}; "
              f"{shown(results / target)} is not up to date: python -m harness.report "
              f"{' '.join(command[3:])}; the next campaign tries again", flush=True)
    return code == 0


def note_stale_reports(results: Path, add: list[str] = (), done: list[str] = ()) -> list[str]:
    """The report folders a failed report left out of date, and the presets whose exported runs wait for their
    reports (``<results>/STALE_REPORTS``, kept across campaigns: a runner stopped in between leaves them to the next
    one): ``add`` joins them, ``done`` (regenerated) leaves them; returns those left. Called holding
    ``results_lock``."""
    path = results / STALE_REPORTS
    try:
        stale = json.loads(path.read_text()) if path.exists() else []
    except (OSError, ValueError):
        stale = []
    stale = sorted({name for name in stale if isinstance(name, str)} - set(done) | set(add))
    if stale:
        results.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stale) + "\n")
    else:
        path.unlink(missing_ok=True)
    return stale


def retry_stale_reports(results: Path) -> int:
    """Regenerate the report folders a failed report left out of date (at a campaign's start); the number that fail
    again."""
    with results_lock(results):
        stale = note_stale_reports(results)
    for target in stale:
        print(f"{time.strftime('%H:%M:%S')} report {target} again: it failed before", flush=True)
    return sum(len(report(target, results)) for target in stale)


class Reporter:
    """Regenerates reports in a thread of its own, a preset at a time and once for every exports queued meanwhile, so
    that the runner refills a freed slot at once (a report takes seconds to a minute); ``finish`` waits for the
    queue and returns the number of report folders that failed."""

    def __init__(self, results: Path):
        self.results, self.failures = results, 0
        self.queue: "queue.Queue[str | None]" = queue.Queue()
        self.waiting: set[str] = set()  # queued, not yet started: a second export joins the first's report
        self.guard = threading.Lock()
        self.thread = threading.Thread(target=self._work, name="reports", daemon=True)
        self.thread.start()

    def submit(self, preset: str) -> None:
        with self.guard:
            if preset in self.waiting:
                return
            self.waiting.add(preset)
        self.queue.put(preset)

    def _work(self) -> None:
        """Report each queued preset; one that raises (the report's own code unreadable, say, after an edit to the
        checkout under a running campaign) is said in one line and counted, and the next is reported: a dead thread
        would leave every later export without its report until the next campaign."""
        while (preset := self.queue.get()) is not None:
            with self.guard:
                self.waiting.discard(preset)
            try:
                failed = len(report(preset, self.results) or ())
            except Exception as error:  # noqa: BLE001 - whatever stopped it, the runner goes on; the note stays
                print(f"{time.strftime('%H:%M:%S')} REPORT FAILED {preset}: {type(error).__name__}: "
                      f"{one_line(error)}; its exported runs stay noted for the next campaign's reports", flush=True)
                failed = 1
            with self.guard:
                self.failures += failed

    def finish(self) -> int:
        self.queue.put(None)
        self.thread.join()
        return self.failures
