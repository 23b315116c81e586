"""A small terminal screen for tests: what a pseudo-terminal of ``rows`` x ``cols`` shows
after some output, for the control sequences rich writes (cursor up and down, erase line,
carriage return, colours and cursor visibility, which change nothing on screen)."""

from __future__ import annotations

import re

__all__ = ["Screen"]

_SEQUENCE = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])|\x1b[()][A-Z0-9]|\x1b[=>]")


class Screen:
    def __init__(self, rows: int = 24, cols: int = 80) -> None:
        self.rows, self.cols = rows, cols
        self.lines = [[" "] * cols for _ in range(rows)]
        self.row = self.col = 0

    def text(self) -> list[str]:
        return ["".join(line).rstrip() for line in self.lines]

    def feed(self, data: str) -> None:
        at = 0
        for match in _SEQUENCE.finditer(data):
            self._plain(data[at : match.start()])
            self._control(match.group(1) or "", match.group(2) or "")
            at = match.end()
        self._plain(data[at:])

    def _control(self, args: str, verb: str) -> None:
        if args.startswith("?"):
            return  # cursor visibility and other modes
        count = int(args.split(";")[0] or 1) if verb in "ABCD" else 0
        if verb == "A":
            self.row = max(0, self.row - count)
        elif verb == "B":
            self.row = min(self.rows - 1, self.row + count)
        elif verb == "C":
            self.col = min(self.cols - 1, self.col + count)
        elif verb == "D":
            self.col = max(0, self.col - count)
        elif verb == "K":
            mode = int(args or 0)
            span = range(self.col, self.cols) if mode == 0 else range(self.cols)
            for col in span:
                self.lines[self.row][col] = " "
        elif verb == "J" and int(args or 0) == 2:
            self.lines = [[" "] * self.cols for _ in range(self.rows)]

    def _plain(self, text: str) -> None:
        for char in text:
            if char == "\r":
                self.col = 0
            elif char == "\n":
                self._newline()
            elif char >= " ":
                if self.col >= self.cols:
                    self.col = 0
                    self._newline()
                self.lines[self.row][self.col] = char
                self.col += 1

    def _newline(self) -> None:
        if self.row == self.rows - 1:
            self.lines = [*self.lines[1:], [" "] * self.cols]
        else:
            self.row += 1
