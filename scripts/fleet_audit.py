"""The invariants of the fleet fault test (scripts/fleet_faults.py), as plain functions of
what the run recorded: the clients' answers, each session's final state and the nodes'
logs. No I/O but reading the logs.

Each cell of the test appends `(its id, the XDG_RUNTIME_DIR of the worker that ran it)`
to its session's `ids`, so the final state says which ids took effect and on which node.
The nodes log `cell start` / `cell end` lines (target `cellvisor::cell`) with session,
request id, node, fencing token and wall-clock milliseconds; between the two lies every
moment a worker may have run the cell.

The invariants:
- **exactly once**: every cell acknowledged `complete` whose save was not told failed is
  in its session's final state exactly once; no id is there twice; no id is there that no
  client sent.
- **told**: a cell acknowledged with `saved: false` may be missing (its save failed and the
  client was told), never twice; every answer says about its save what its node logged.
- **one node at a time**: no two cells of one session ran on two nodes in overlapping
  intervals with both their effects in the final state. Overlaps where one side's effect
  was discarded (a paused node's cell, killed or never committed once it woke) are
  counted, not failures: fencing lets a stale node run, never count.
"""

import re
from collections import Counter, defaultdict

LINE = re.compile(r"cellvisor::cell: cell (start|end) (.*)$")
FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def parse_line(line):
    """The event (`start` or `end`) and fields of a cell log line, or None."""
    found = LINE.search(line)
    if found is None:
        return None
    fields = {}
    for name, value in FIELD.findall(found.group(2)):
        if value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        fields[name] = value
    return found.group(1), fields


def intervals(log_lines, ends_at):
    """Each cell's `{session, request, node, token, cell_id, start, end, saved, status}`
    from a node log's lines; a cell with no end line (its node was killed, or the run
    ended first) lasts until `ends_at(node, start)` (wall-clock ms)."""
    open_cells, done = {}, []
    for line in log_lines:
        parsed = parse_line(line)
        if parsed is None:
            continue
        event, f = parsed
        key = (f.get("node"), f.get("cell_id"))
        if event == "start":
            open_cells[key] = {"session": f.get("session"), "request": f.get("request"), "node": f.get("node"),
                               "token": f.get("token"), "cell_id": f.get("cell_id"), "start": int(f["wall_ms"]),
                               "end": None, "saved": None, "status": None}
        else:
            cell = open_cells.pop(key, None)
            if cell is None:
                continue
            cell.update(end=int(f["wall_ms"]), saved=f.get("saved"), status=f.get("status"))
            done.append(cell)
    for cell in open_cells.values():
        cell["end"] = ends_at(cell["node"], cell["start"])
        done.append(cell)
    return done


def check_exactly_once(acks, finals, sent_ids):
    """Violations of "exactly once" and counts: `acks` maps each acknowledged id to its
    answer's cell (`status`, `saved`), `finals` each session to its final `ids` list of
    `[id, run_dir]`, `sent_ids` every id a client sent."""
    violations, counts = [], Counter()
    present = Counter()
    for session, ids in finals.items():
        for entry in ids:
            present[entry[0]] += 1
    for cell_id, times in present.items():
        if times > 1:
            violations.append(f"{cell_id} is in the final state {times} times")
        if cell_id not in sent_ids:
            violations.append(f"{cell_id} is in the final state but no client sent it")
    for cell_id, cell in acks.items():
        if cell.get("status") != "complete":
            continue
        counts["acknowledged complete"] += 1
        saved = cell.get("saved")
        told_failed = isinstance(saved, dict) and saved.get("saved") is False
        if told_failed:
            counts["acknowledged with saved: false"] += 1
            if present[cell_id] == 0:
                counts["missing after a save told failed"] += 1
        elif present[cell_id] != 1:
            violations.append(f"{cell_id} was acknowledged complete (saved: {saved}) and is in the final state "
                              f"{present[cell_id]} times")
    counts["ids in the final states"] = sum(present.values())
    return violations, counts


def check_told(answers, cells_logged):
    """Violations of "told": each answer (`node`, `cell_id`, `saved`) against the end line
    its node logged for that cell."""
    by_key = {(c["node"], c["cell_id"]): c for c in cells_logged}
    violations, counts = [], Counter()
    for answer in answers:
        logged = by_key.get((answer["node"], str(answer["cell_id"])))
        if logged is None or logged["saved"] is None:
            counts["answers without a logged end"] += 1
            continue
        saved = answer.get("saved")
        told = "none" if saved is None else ("true" if saved.get("saved") else "false")
        if told != logged["saved"]:
            violations.append(f"cell {answer['cell_id']} on {answer['node']}: the answer said saved={told}, "
                              f"the node logged saved={logged['saved']}")
        if logged["saved"] == "false":
            counts["saves failed and told"] += 1
    return violations, counts


def check_one_node_at_a_time(cells_logged, finals, run_dirs):
    """Violations of "one node at a time", and the overlaps that were harmless (one side's
    effect discarded). `run_dirs` maps a worker's XDG_RUNTIME_DIR to its node's name."""
    in_state = set()
    for ids in finals.values():
        for cell_id, run_dir in ids:
            in_state.add((cell_id, run_dirs.get(run_dir, "?")))
    by_session = defaultdict(list)
    for cell in cells_logged:
        by_session[cell["session"]].append(cell)
    violations, counts = [], Counter()
    for session, cells in by_session.items():
        cells.sort(key=lambda c: c["start"])
        for i, a in enumerate(cells):
            for b in cells[i + 1:]:
                if b["start"] >= a["end"]:
                    break
                if a["node"] == b["node"]:
                    continue
                both = (a["request"], a["node"]) in in_state and (b["request"], b["node"]) in in_state
                if both:
                    violations.append(f"session {session}: {a['request']} on {a['node']} (token {a['token']}, "
                                      f"{a['start']}..{a['end']}) and {b['request']} on {b['node']} (token "
                                      f"{b['token']}, {b['start']}..{b['end']}) overlapped and both took effect")
                else:
                    counts["overlaps whose stale side was discarded"] += 1
    counts["cells logged"] = len(cells_logged)
    return violations, counts
