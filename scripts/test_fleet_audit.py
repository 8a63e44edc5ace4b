"""Unit tests of the fault test's invariants (scripts/fleet_audit.py): each check finds what
it must (a lost acknowledged cell, a duplicate, a split brain, an untold failed save) and
lets pass what is allowed (a paused node's discarded cell, a told failed save).
Run by tests/fleet_faults.rs: `python3 scripts/test_fleet_audit.py`."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_audit  # noqa: E402

RUN = {"/run/a": "node-0", "/run/b": "node-1"}


def line(event, request, node, start_ms, cell_id, token="7", saved=None):
    tail = f" status=Complete saved=\"{saved}\"" if event == "end" else ""
    return (f"2026-12-07T15:34:22.727581Z  INFO cellvisor::cell: cell {event} session=s language=python "
            f"cell_id={cell_id} request={request} node={node} token={token} wall_ms={start_ms}{tail}")


class ExactlyOnce(unittest.TestCase):
    def test_a_lost_acknowledged_cell_a_duplicate_and_a_stranger_are_violations(self):
        acks = {"s.0": {"status": "complete", "saved": {"saved": True}},
                "s.1": {"status": "complete", "saved": {"saved": True}},
                "s.2": {"status": "complete", "saved": {"saved": True}}}
        finals = {"s": [["s.0", "/run/a"], ["s.2", "/run/a"], ["s.2", "/run/b"], ["x.9", "/run/a"]]}
        violations, _ = fleet_audit.check_exactly_once(acks, finals, {"s.0", "s.1", "s.2"})
        text = "\n".join(violations)
        self.assertIn("s.1 was acknowledged complete", text)
        self.assertIn("s.2 is in the final state 2 times", text)
        self.assertIn("x.9 is in the final state but no client sent it", text)
        self.assertNotIn("s.0", text)

    def test_a_told_failed_save_may_be_missing_and_an_unacknowledged_cell_may_be_there(self):
        acks = {"s.0": {"status": "complete", "saved": {"saved": False, "why": "full"}}}
        finals = {"s": [["s.1", "/run/a"]]}
        violations, counts = fleet_audit.check_exactly_once(acks, finals, {"s.0", "s.1"})
        self.assertEqual(violations, [])
        self.assertEqual(counts["missing after a save told failed"], 1)


class Told(unittest.TestCase):
    def test_an_answer_that_hides_a_failed_save_is_a_violation(self):
        logged = fleet_audit.intervals([line("start", "s.0", "node-0", 10, 1),
                                        line("end", "s.0", "node-0", 20, 1, saved="false")], lambda n, s: 99)
        hidden = [{"node": "node-0", "cell_id": 1, "saved": {"saved": True}}]
        violations, _ = fleet_audit.check_told(hidden, logged)
        self.assertEqual(len(violations), 1)
        told = [{"node": "node-0", "cell_id": 1, "saved": {"saved": False}}]
        violations, counts = fleet_audit.check_told(told, logged)
        self.assertEqual(violations, [])
        self.assertEqual(counts["saves failed and told"], 1)


class OneNodeAtATime(unittest.TestCase):
    def test_overlapping_cells_on_two_nodes_that_both_took_effect_are_a_split_brain(self):
        log = [line("start", "s.0", "node-0", 100, 1), line("end", "s.0", "node-0", 500, 1, saved="true"),
               line("start", "s.1", "node-1", 300, 1), line("end", "s.1", "node-1", 400, 1, saved="true")]
        cells = fleet_audit.intervals(log, lambda n, s: 9999)
        both = {"s": [["s.0", "/run/a"], ["s.1", "/run/b"]]}
        violations, _ = fleet_audit.check_one_node_at_a_time(cells, both, RUN)
        self.assertEqual(len(violations), 1, violations)
        # The paused node's cell was discarded (retried and run on node-1): allowed, counted.
        one = {"s": [["s.0", "/run/b"], ["s.1", "/run/b"]]}
        violations, counts = fleet_audit.check_one_node_at_a_time(cells, one, RUN)
        self.assertEqual(violations, [])
        self.assertEqual(counts["overlaps whose stale side was discarded"], 1)

    def test_a_killed_nodes_cell_lasts_until_its_death_and_cells_in_turn_do_not_overlap(self):
        log = [line("start", "s.0", "node-0", 100, 1),  # no end: its node was killed at 250
               line("start", "s.1", "node-1", 300, 1), line("end", "s.1", "node-1", 400, 1, saved="true")]
        cells = fleet_audit.intervals(log, lambda node, start: 250)
        both = {"s": [["s.0", "/run/a"], ["s.1", "/run/b"]]}
        violations, _ = fleet_audit.check_one_node_at_a_time(cells, both, RUN)
        self.assertEqual(violations, [])
        cells = fleet_audit.intervals(log, lambda node, start: 350)  # killed only after s.1 began
        violations, _ = fleet_audit.check_one_node_at_a_time(cells, both, RUN)
        self.assertEqual(len(violations), 1)


if __name__ == "__main__":
    unittest.main()
