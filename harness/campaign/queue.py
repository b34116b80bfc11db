"""A campaign queue file: read and checked cell by cell, its cells composed, and those ``--only`` selects."""

from __future__ import annotations

import math
from itertools import product
from pathlib import Path

import yaml

from common.checks import ConfigError
from harness import artefacts, cli
from harness.campaign import cells as composed
from harness.campaign.cells import CellError, cell_identity

CELL_KEYS = ("priority", "preset", "name", "seeds", "cost", "overrides", "chunk", "cpus", "mem_gb", "time_min", "gpus",
             "gpu_hours", "like", "scale", "grid")
REQUIRED = ("priority", "preset", "name", "seeds", "cost")  # a cell's keys without a default
PER_POINT = ("cost", "like", "scale")  # keys a grid entry may give per value of one axis: {axis: {value: ...}}
NAME_PREFIX = {"task.H": "h", "task.V": "v", "task.K": "k", "algorithm.epochs": "e", "algorithm.eta": "eta"}
NAME_VALUE = {"bag_of_tokens": "bag", "sequential": "seq"}  # the reward's short names in a cell's name
GPU_OVERRIDE = "device=cuda"  # a GPU cell's: its runs batch their seeds on the GPU (``gpus: 1``)
SEED_AXIS = "seed_offset"  # a sweep over it is a sweep over seeds, which the campaign's jobs set
DECLARED = "declared"  # a queue's ``cells: declared``: its entries are those its presets declare
MEM_GB = 4  # a SLURM job's memory where its cell names none (conf/hydra/launcher/submitit_slurm_cpu.yaml's)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value) -> bool:
    """A finite number > 0 (an integer or a float, not a bool)."""
    return (_integer(value) or isinstance(value, float)) and 0 < value < math.inf


RESOURCE_CHECKS = (  # (key, whether a value is valid, what is expected): a cell's optional keys
    ("cpus", lambda v: _integer(v) and v >= 1, "an integer >= 1 (CPUs per job, default 1)"),
    ("mem_gb", _positive, f"a number > 0 (GB of memory per job, default {MEM_GB})"),
    ("time_min", lambda v: _integer(v) and v >= 1,
     "an integer >= 1 (minutes per job; default: the cell's cost for the job's episodes, with a margin)"),
    ("gpus", lambda v: _integer(v) and v in (0, 1), "0 or 1 (a GPU cell's jobs get one GPU each; default 0)"),
    ("chunk", lambda v: _integer(v) and v >= 1, "an integer >= 1 (seeds per job; default: the queue's chunk)"),
    ("gpu_hours", _positive, "a number > 0 (the cell's projected GPU-hours, all its seeds)"),
    ("like", lambda v: isinstance(v, str) and v.count("/") == 1, "<preset>/<cell>, a cell of the queue"),
    ("scale", _positive, "a number > 0 (this cell's cost over its like cell's)"))


def queue_file(name: str) -> str:
    """The queue's file name, as refusals name it: a YAML path's own name, else ``<name>.yaml``."""
    return Path(name).name if name.endswith(".yaml") else name + ".yaml"


def load_queue(name: str) -> dict:
    path = Path(name) if name.endswith(".yaml") else artefacts.QUEUES / f"{name}.yaml"
    if not path.exists():
        choices = ", ".join(artefacts.queues())
        raise cli.Refusal(f"Error: campaign queue {name!r} not found; valid choices: {choices}")
    queue = yaml.safe_load(path.read_text()) or {}
    located = [(cell, where) for entry, where in _entries(queue.get("cells"), path)
               for cell in expand(entry, where)]  # each cell with where its entry is written, for refusals
    queue["cells"] = [cell for cell, _ in located]
    seen: dict[tuple[str, str], dict] = {}
    for cell, where in located:
        _check_required(cell, where)
        _check_seed_overrides(cell, where)
        _check_repeat(cell, seen.get((cell["preset"], cell["name"])), where)
        seen[(cell["preset"], cell["name"])] = cell
        check_resources(cell, where)
    _check_likes(located)
    return queue


def _entries(cells, path: Path) -> list[tuple[dict, str]]:
    """(entry, where) of a queue file's ``cells``: a list, or ``declared`` (its presets' entries for it)."""
    if cells == DECLARED:
        declared = _declared_entries(path.stem)
        if not declared:
            raise cli.Refusal(f"Error: {path.name}: cells: declared, but no preset declares entries for queue "
                              f"{path.stem!r} (artefact.campaign.{path.stem}); valid: a list of cells, or a queue a "
                              "preset declares")
        return declared
    if cells is not None and not isinstance(cells, list):
        raise cli.Refusal(f"Error: {path.name}: cells={cells!r} is not valid; expected a list of cells or "
                          f"{DECLARED!r}")
    return [(entry, f"{path.name}: cells[{index}]") for index, entry in enumerate(cells or ())]


def _declared_entries(queue: str) -> list[tuple[dict, str]]:
    """(entry, where a refusal finds it) of every entry the presets declare for ``queue`` (``artefact.campaign.
    <queue>``, harness/artefacts.py), in the queue's order; an entry's preset is the one that declares it."""
    located = []
    try:
        declared = artefacts.queue_entries(queue)
    except ConfigError as error:
        raise cli.Refusal(f"Error: {error}") from None
    for preset, index, entry in declared:
        where = f"{preset}.yaml: artefact.campaign.{queue}[{index}]"
        if "preset" in entry:
            raise cli.Refusal(f"Error: {where}.preset is not valid here: the entry's preset is the one declaring it")
        located.append(({"preset": preset, **entry}, where))
    return located


def expand(entry: dict, where: str) -> list[dict]:
    """The cells of a queue entry. A ``grid`` entry names points of its preset's sweep (``grid: {axis: value or
    [values]}``, every other axis at all its values): each point is a cell whose overrides set every axis of the
    sweep, in the preset's order (then the entry's own ``overrides``, such as ``device=cuda``), named by the values
    of the axes the preset sweeps over (``prompts_h8_tpo``; ``name`` renames an entry of one point). ``cost``,
    ``like`` and ``scale`` may be given per value of one axis (``{algorithm: {tpo: 0.45, dg: 0.1}}``). So a queue
    picks what to run, in which order and at which estimate, and never restates a preset's values: a value outside
    the sweep is refused in one line. A preset that sweeps ``seed_offset`` (an LLM preset: one seed per run) is
    a cell per point of its other axes whose jobs are one seed each (``chunk: 1``): the campaign sets the offsets.
    An entry without ``grid`` is one cell as written."""
    if not isinstance(entry, dict) or "grid" not in entry:
        return [entry]
    from harness.config import preset_sweep

    try:
        sweep = preset_sweep(str(entry.get("preset")))
    except ConfigError as error:
        raise cli.Refusal(f"Error: {where}: {error}") from None
    one_seed_runs = sweep.pop(SEED_AXIS, None) is not None
    if one_seed_runs and SEED_AXIS in (entry.get("grid") or {}):
        raise cli.Refusal(f"Error: {where}.grid.{SEED_AXIS} is the campaign's to set: its jobs train seeds 0 .. "
                          "seeds - 1, one a run; valid: the entry's seeds")
    if one_seed_runs and entry.get("chunk", 1) != 1:
        raise cli.Refusal(f"Error: {where}.chunk={entry['chunk']!r} is not valid for preset {entry['preset']}, whose "
                          "runs train one seed each (it sweeps seed_offset); valid choices: 1")
    axes = _grid_axes(entry.get("grid"), sweep, where)
    points = [dict(zip(axes, values)) for values in product(*axes.values())]
    if "name" in entry and len(points) != 1:
        raise cli.Refusal(f"Error: {where}.name is for a grid of one point; this grid has {len(points)}")
    swept = [axis for axis, values in sweep.items() if len(values) > 1]
    return [_cell(entry, point, swept, one_seed_runs, where) for point in points]


def _cell(entry: dict, point: dict[str, str], swept: list[str], one_seed_runs: bool, where: str) -> dict:
    """The cell of a grid entry at one point of its preset's sweep."""
    cell = {key: value for key, value in entry.items() if key != "grid"}
    if one_seed_runs:
        cell.setdefault("chunk", 1)
    cell["name"] = entry.get("name") or "_".join(_name_part(axis, point[axis]) for axis in swept)
    cell["overrides"] = [f"{axis}={value}" for axis, value in point.items()] + list(entry.get("overrides") or ())
    for key in PER_POINT:
        if isinstance(entry.get(key), dict):
            cell[key] = _per_point(entry[key], point, f"{where}.{key}")
    return cell


def _grid_axes(grid, sweep: dict[str, list[str]], where: str) -> dict[str, list[str]]:
    """Each axis of the sweep with the values the grid picks (its order), as the preset spells them."""
    from harness.config import sweep_value  # (harness.config imports torch: only when a queue has grids)

    if not isinstance(grid, dict):
        raise cli.Refusal(f"Error: {where}.grid={grid!r} is not valid; expected a mapping of the preset's sweep axes "
                          f"({', '.join(sweep)}) to a value or a list of values")
    unknown = [axis for axis in grid if axis not in sweep]
    if unknown:
        raise cli.Refusal(f"Error: {where}.grid.{unknown[0]} is not an axis of the preset's sweep; valid axes: "
                          f"{', '.join(sweep) or 'none (the preset sweeps nothing)'}")
    axes = {}
    for axis, values in sweep.items():
        picked = grid.get(axis, values)
        picked = picked if isinstance(picked, list) else [picked]
        spelled = {sweep_value(value): value for value in values}
        outside = [value for value in picked if sweep_value(value) not in spelled]
        if outside:
            raise cli.Refusal(f"Error: {where}.grid.{axis}={outside[0]!r} is not a value of the preset's sweep; "
                              f"valid values: {', '.join(values)}")
        axes[axis] = [spelled[sweep_value(value)] for value in picked]
    return axes


def _name_part(axis: str, value: str) -> str:
    from harness.config import sweep_value

    number = sweep_value(value)
    if axis in NAME_PREFIX and isinstance(number, (int, float)):
        return f"{NAME_PREFIX[axis]}{number:g}"
    return NAME_VALUE.get(value, value)


def _per_point(given: dict, point: dict[str, str], where: str):
    """The value of a per-axis key (``{axis: {value: x}}``) at a grid point."""
    from harness.config import sweep_value

    if len(given) != 1 or next(iter(given)) not in point or not isinstance(next(iter(given.values())), dict):
        raise cli.Refusal(f"Error: {where}={given!r} is not valid; expected a value, or one axis of the grid mapped "
                          f"to a value per point ({{axis: {{value: x}}}}; axes: {', '.join(point)})")
    axis, values = next(iter(given.items()))
    chosen = {sweep_value(value): x for value, x in values.items()}.get(sweep_value(point[axis]))
    if chosen is None:
        raise cli.Refusal(f"Error: {where} has no value for {axis}={point[axis]}; it needs one per value of {axis} "
                          "the grid picks")
    return chosen


def _check_required(cell: dict, where: str) -> None:
    """SystemExit (one line) for a cell without one of ``REQUIRED`` or with a cost that is not a number > 0."""
    missing = [key for key in REQUIRED if key not in cell]
    if missing:
        raise cli.Refusal(f"Error: {where} has no {missing[0]}; a cell needs priority, preset, name, seeds, cost")
    if isinstance(cell["cost"], bool) or not isinstance(cell["cost"], (int, float)) or not cell["cost"] > 0:
        raise cli.Refusal(f"Error: {where}.cost={cell['cost']!r} is not valid; expected CPU-seconds per "
                         "seed-episode > 0")


def _check_seed_overrides(cell: dict, where: str) -> None:
    """SystemExit (one line) for overrides that set what the campaign's jobs set (their seeds and offsets), which
    the job's own would silently replace."""
    for override in cell.get("overrides") or ():
        key = str(override).split("=", 1)[0].lstrip("+~")
        if key in ("seeds", SEED_AXIS):
            raise cli.Refusal(f"Error: {where}.overrides: {override!r} is the campaign's to set (each job runs a range "
                              "of the cell's seeds); valid: the cell's seeds and chunk")


def _check_repeat(cell: dict, earlier: dict | None, where: str) -> None:
    """SystemExit (one line) for a cell listed again (``earlier``: its last listing) that does not take it further:
    other overrides, or no more seeds."""
    if earlier is not None and (list(cell.get("overrides") or ()) != list(earlier.get("overrides") or ())
                                or not cell["seeds"] > earlier["seeds"]):
        raise cli.Refusal(f"Error: {where} repeats the cell {cell['preset']}/{cell['name']}; a cell listed again "
                         f"takes it further: the same overrides and more seeds than its {earlier['seeds']}")


def _check_likes(located: list[tuple[dict, str]]) -> None:
    """SystemExit (one line) for a cell whose ``like`` is not a cell of the queue."""
    cells = {f"{cell['preset']}/{cell['name']}" for cell, _ in located}
    for cell, where in located:
        if "like" in cell and cell["like"] not in cells:
            raise cli.Refusal(f"Error: {where}.like={cell['like']!r} is not a cell of the queue; "
                             "expected <preset>/<cell>, a cell whose measured cost this one's estimate scales")


def check_resources(cell: dict, where: str) -> None:
    """SystemExit (one line naming the key and its valid values) for a cell key that is not a valid one, or a SLURM
    resource (``cpus``, ``mem_gb``, ``time_min``, ``gpus``) of the wrong type or range: a typo would otherwise be
    ignored, or refused by sbatch only after the jobs before it were submitted."""
    unknown = [key for key in cell if key not in CELL_KEYS]
    if unknown:
        raise cli.Refusal(f"Error: {where} has an unknown key {unknown[0]!r}; valid keys: {', '.join(CELL_KEYS)}")
    for key, valid, expected in RESOURCE_CHECKS:
        if key in cell and not valid(cell[key]):
            raise cli.Refusal(f"Error: {where}.{key}={cell[key]!r} is not valid; expected {expected}")
    _check_device(cell, where)


def _check_device(cell: dict, where: str) -> None:
    """SystemExit (one line) for a cell whose GPU keys do not go together: ``gpus: 1`` and the override
    ``GPU_OVERRIDE`` (both or neither), ``gpu_hours`` for a GPU cell only, ``scale`` for a cell with ``like``."""
    gpu, on_cuda = cell.get("gpus", 0) == 1, GPU_OVERRIDE in (cell.get("overrides") or ())
    if gpu != on_cuda:  # the GPU a job asks for and the device its run uses go together
        raise cli.Refusal(f"Error: {where} has gpus: {cell.get('gpus', 0)} but "
                         f"{'no' if gpu else 'the'} override {GPU_OVERRIDE}; a GPU cell has both, a CPU cell neither")
    if "gpu_hours" in cell and not gpu:
        raise cli.Refusal(f"Error: {where}.gpu_hours is for a GPU cell (gpus: 1, {GPU_OVERRIDE})")
    if "scale" in cell and "like" not in cell:
        raise cli.Refusal(f"Error: {where}.scale is for a cell with like: <preset>/<cell> (whose cost it scales)")


def check_cells(queue: dict, name: str) -> None:
    """Compose every cell of the queue (every priority's: all feed the cost calibration); SystemExit naming the
    first cell whose overrides do not compose."""
    for index, cell in enumerate(queue.get("cells") or ()):
        try:
            cell_identity(cell["preset"], tuple(cell.get("overrides", ())))
        except CellError as error:
            raise cli.Refusal(f"Error: {queue_file(name)}: cells[{index}] ({cell['preset']}/{cell['name']}) does not "
                             f"compose: {error}; fix its overrides") from None
    composed.CELLS.save()


def check_only(queue: dict, only: str | None, name: str) -> set[str] | None:
    """The ``--only`` selection: priorities (``P7``) and cells (``<preset>/<cell>``); SystemExit listing the
    queue's priorities for a name that is neither."""
    if only is None:
        return None
    chosen = {item.strip() for item in only.split(",") if item.strip()}
    cells = queue.get("cells") or ()
    priorities = list(dict.fromkeys(str(cell["priority"]) for cell in cells))
    unknown = sorted(chosen - set(priorities) - {f"{cell['preset']}/{cell['name']}" for cell in cells})
    if unknown or not chosen:
        raise cli.Refusal(f"Error: --only {only!r}: {', '.join(unknown) or 'nothing'} is neither a priority nor a "
                         f"cell (<preset>/<cell>) of {queue_file(name)}; "
                         f"valid priorities (case-sensitive): {', '.join(priorities)}")
    return chosen


def selected(cell: dict, only: set[str] | None) -> bool:
    """Whether ``--only`` (None: everything) selects the queue cell, by its priority or as ``<preset>/<cell>``."""
    return only is None or str(cell["priority"]) in only or f"{cell['preset']}/{cell['name']}" in only


def queue_cells(queue: dict, only: set[str] | None = None) -> list[tuple[str, str]]:
    """The (preset, cell) pairs of the queue's cells ``only`` selects (all when None): what a campaign of them
    locks."""
    return sorted({(str(cell["preset"]), str(cell["name"])) for cell in queue.get("cells") or ()
                   if selected(cell, only)})
