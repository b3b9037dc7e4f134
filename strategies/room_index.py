"""Destinations in order of real-usage room, in blocks that skip nodes without request room in bulk."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

BLOCK = 32  # keys a block starts with; it splits in two beyond twice as many

Key = tuple[int, str]  # (usage room, node name)
Requests = tuple[int, int, int]  # CPU millicores, memory bytes, pods


@dataclass(slots=True)
class Room:
    usage_m: int  # real CPU usage the node may still take before reaching its cap
    cpu_m: int  # unrequested allocatable CPU
    memory: int
    pods: int


class RoomIndex:
    """The keys ``(usage room, node)`` in ascending order, cut into consecutive sorted blocks.

    Each block knows the most CPU, memory and pod room among its nodes, so that a search for a pod's
    requests passes over a block where no node could take them with three comparisons instead of a
    check per node. The block figures are kept exact as rooms change, so they only ever skip nodes
    that a node-by-node check would reject.

    A room's figures may change only while its key is out of the index: ``discard`` the key, change
    the room, ``add`` the new key.
    """

    def __init__(self, rooms: Mapping[str, Room], block: int = BLOCK) -> None:
        self._rooms = rooms
        self._size = block
        keys = sorted((room.usage_m, name) for name, room in rooms.items())
        self._blocks = [keys[i : i + block] for i in range(0, len(keys), block)]
        self._last = [block[-1] for block in self._blocks]
        self._cpu = [0] * len(self._blocks)
        self._memory = [0] * len(self._blocks)
        self._pods = [0] * len(self._blocks)
        for b in range(len(self._blocks)):
            self._refresh(b)

    def __len__(self) -> int:
        return sum(len(block) for block in self._blocks)

    def add(self, key: Key) -> None:
        room = self._rooms[key[1]]
        if not self._blocks:
            self._blocks.append([key])
            self._last.append(key)
            self._cpu.append(room.cpu_m)
            self._memory.append(room.memory)
            self._pods.append(room.pods)
            return
        b = min(bisect.bisect_left(self._last, key), len(self._blocks) - 1)
        block = self._blocks[b]
        bisect.insort(block, key)
        self._last[b] = block[-1]
        self._cpu[b] = max(self._cpu[b], room.cpu_m)
        self._memory[b] = max(self._memory[b], room.memory)
        self._pods[b] = max(self._pods[b], room.pods)
        if len(block) > 2 * self._size:
            self._split(b)

    def discard(self, key: Key) -> None:
        b = bisect.bisect_left(self._last, key)
        block = self._blocks[b]
        i = bisect.bisect_left(block, key)
        if block[i] != key:
            raise KeyError(key)
        del block[i]
        if not block:
            for column in (self._blocks, self._last, self._cpu, self._memory, self._pods):
                del column[b]
            return
        self._last[b] = block[-1]
        room = self._rooms[key[1]]
        if room.cpu_m >= self._cpu[b] or room.memory >= self._memory[b] or room.pods >= self._pods[b]:
            self._refresh(b)  # the key may have held a block maximum

    def ascending_from(self, usage_m: int, least: Requests | None = None) -> Iterator[Key]:
        """Keys with at least ``usage_m`` of usage room, least room first, passing over the blocks where
        no node has the ``least`` CPU, memory and pod room (None: every key)."""
        start = (usage_m, "")
        first = bisect.bisect_left(self._last, start)
        for b in range(first, len(self._blocks)):
            if least is not None and self._short_of(b, least):
                continue
            block = self._blocks[b]
            yield from block[bisect.bisect_left(block, start) :] if b == first else block

    def descending_to(self, usage_m: int, least: Requests | None = None) -> Iterator[Key]:
        """The keys of ``ascending_from``, most room first."""
        start = (usage_m, "")
        first = bisect.bisect_left(self._last, start)
        for b in range(len(self._blocks) - 1, first - 1, -1):
            if least is not None and self._short_of(b, least):
                continue
            block = self._blocks[b]
            yield from reversed(block[bisect.bisect_left(block, start) :] if b == first else block)

    def _short_of(self, b: int, least: Requests) -> bool:
        """No node of block ``b`` has that much CPU, memory and pod room."""
        return self._cpu[b] < least[0] or self._memory[b] < least[1] or self._pods[b] < least[2]

    def _refresh(self, b: int) -> None:
        rooms = [self._rooms[name] for _, name in self._blocks[b]]
        self._cpu[b] = max(room.cpu_m for room in rooms)
        self._memory[b] = max(room.memory for room in rooms)
        self._pods[b] = max(room.pods for room in rooms)

    def _split(self, b: int) -> None:
        block = self._blocks[b]
        upper = block[self._size :]
        del block[self._size :]
        self._blocks.insert(b + 1, upper)
        self._last[b] = block[-1]
        self._last.insert(b + 1, upper[-1])
        for column in (self._cpu, self._memory, self._pods):
            column.insert(b + 1, 0)
        self._refresh(b)
        self._refresh(b + 1)
