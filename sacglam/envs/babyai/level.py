"""The minigrid level under BabyAI-Text: one room, a few unique objects, one mission.

Spec: `docs/reference/babyai-text.md`, "Levels". Built on minigrid's `RoomGridLevel`, so success is decided
by BabyAI's own verifiers (`GoToInstr`, `PickupInstr`) and the BabyAI bot can solve it.
"""

from __future__ import annotations

from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel
from minigrid.envs.babyai.core.verifier import GoToInstr, ObjDesc, PickupInstr

from sacglam.envs.babyai.missions import Mission, Split, missions

_INSTRUCTIONS = {"go to": GoToInstr, "pick up": PickupInstr}


class LocalMissionLevel(RoomGridLevel):
    """A single `room_size` x `room_size` room (walls included) with `n_objects` keys, balls and
    boxes, unique in (colour, type), and the agent at a random cell and heading. The mission is
    drawn uniformly among the missions of `tasks` in `split` whose object is in the room (objects
    are redrawn until one is), or forced by `set_next_mission` for the next reset."""

    def __init__(self, tasks: tuple[str, ...], split: Split, n_objects: int, room_size: int, max_steps: int):
        self.allowed = frozenset(missions(tasks, split))
        self.n_objects = n_objects
        self._forced: Mission | None = None
        super().__init__(room_size=room_size, num_rows=1, num_cols=1, max_steps=max_steps)

    def set_next_mission(self, mission: Mission | None) -> None:
        """The mission of the next reset (None: draw one)."""
        self._forced = mission

    def gen_mission(self) -> None:
        forced, self._forced = self._forced, None
        while True:
            placed = []
            if forced is not None:
                self.add_object(0, 0, forced.type, forced.color)
                placed.append((forced.type, forced.color))
            for obj in self.add_distractors(0, 0, num_distractors=self.n_objects - len(placed), all_unique=True):
                placed.append((obj.type, obj.color))
            if forced is not None:
                mission = forced
                break
            options = sorted(m for m in self.allowed if (m.type, m.color) in placed)
            if options:
                mission = self._rand_elem(options)
                break
            room = self.room_grid[0][0]  # no allowed mission among these objects: redraw them
            for obj in room.objs:
                x, y = obj.cur_pos
                self.grid.set(int(x), int(y), None)
            room.objs.clear()
        self.place_agent(0, 0)
        self.mission_tuple = mission
        self.instrs = _INSTRUCTIONS[mission.task](ObjDesc(mission.type, mission.color))
