"""Check outcomes, level certification and the text / JSON / JUnit renderings (§14.5)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from xml.etree import ElementTree

from rcpkit.conformance.model import Check, Level

__all__ = ["CheckResult", "Outcome", "Report"]

LEVELS = (Level.L0, Level.L1, Level.L2)


class Outcome(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check; ``detail`` is the failure or skip reason."""

    check: Check
    outcome: Outcome
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The report's JSON entry for this check."""
        c = self.check
        return {
            "id": c.id,
            "level": c.level.value,
            "section": c.section,
            "title": c.title,
            "outcome": self.outcome.value,
            **({"detail": self.detail} if self.detail else {}),
        }

    def text_lines(self) -> list[str]:
        """``[level] OUTCOME §section id: title``, then the reason unless it passed."""
        c = self.check
        lines = [f"  [{c.level}] {self.outcome:<4}  §{c.section:<7} {c.id}: {c.title}"]
        if self.detail and self.outcome is not Outcome.PASS:
            lines.extend(f"          {line}" for line in self.detail.splitlines())
        return lines


@dataclass(frozen=True)
class Report:
    """All results of one run against one target."""

    target: str
    results: tuple[CheckResult, ...]
    declared_level: str | None
    partial: bool = False

    @property
    def certified_level(self) -> Level | None:
        """Highest level whose checks and all lower levels' checks pass (§14.5).

        L0 needs no failure at L0; each higher level also needs its profile
        checks (the features that define the level) to have passed, not merely
        been skipped.
        """
        certified: Level | None = None
        if self.partial:
            return certified
        for level in LEVELS:
            upto = [r for r in self.results if LEVELS.index(r.check.level) <= LEVELS.index(level)]
            if any(r.outcome is Outcome.FAIL for r in upto):
                break
            profile = [r for r in self.results if r.check.profile and r.check.level is level]
            if any(r.outcome is not Outcome.PASS for r in profile):
                break
            certified = level
        return certified

    @property
    def declaration_honest(self) -> bool:
        """False when ``_meta.conformance`` claims more than was certified (§14.5)."""
        if self.declared_level not in {level.value for level in LEVELS}:
            return False
        certified = self.certified_level
        return certified is not None and LEVELS.index(Level(self.declared_level)) <= LEVELS.index(
            certified
        )

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    @property
    def ok(self) -> bool:
        """Exit-status verdict: no failed check and, for a full run, no overclaim."""
        return self.count(Outcome.FAIL) == 0 and (self.partial or self.declaration_honest)

    def to_json(self) -> dict[str, Any]:
        certified = self.certified_level
        return {
            "target": self.target,
            "certifiedLevel": certified.value if certified else None,
            "declaredLevel": self.declared_level,
            "declarationHonest": self.declaration_honest,
            "partial": self.partial,
            "counts": {o.value.lower(): self.count(o) for o in Outcome},
            "checks": [r.to_json() for r in self.results],
        }

    def summary_lines(self) -> list[str]:
        """Counts, certified level and the verdict on the declared level."""
        lines = [
            f"  {self.count(Outcome.PASS)} passed, {self.count(Outcome.FAIL)} failed, "
            f"{self.count(Outcome.SKIP)} skipped"
        ]
        if self.partial:
            return [*lines, "  CERTIFIED LEVEL: n/a (partial run: only selected checks ran)"]
        certified = self.certified_level
        lines.append(f"  CERTIFIED LEVEL: {certified.value if certified else 'none'}")
        verdict = "consistent" if self.declaration_honest else "NOT SUPPORTED (overclaim)"
        if self.declared_level is None:
            verdict = "missing (§14 requires it)"
        lines.append(f"  declared _meta.conformance={self.declared_level!r} — {verdict}")
        return lines

    def to_junit(self) -> str:
        suite = ElementTree.Element(
            "testsuite",
            name="rcpkit-conformance",
            tests=str(len(self.results)),
            failures=str(self.count(Outcome.FAIL)),
            skipped=str(self.count(Outcome.SKIP)),
            time=f"{sum(r.seconds for r in self.results):.3f}",
        )
        for r in self.results:
            case = ElementTree.SubElement(
                suite,
                "testcase",
                classname=f"{r.check.level}.§{r.check.section}",
                name=f"{r.check.id}: {r.check.title}",
                time=f"{r.seconds:.3f}",
            )
            if r.outcome is Outcome.FAIL:
                ElementTree.SubElement(
                    case, "failure", message=r.detail.splitlines()[0]
                ).text = r.detail
            elif r.outcome is Outcome.SKIP:
                ElementTree.SubElement(case, "skipped", message=r.detail)
        if not (self.partial or self.declaration_honest):
            case = ElementTree.SubElement(
                suite, "testcase", classname="L0.§14.5", name="declared level is honest"
            )
            ElementTree.SubElement(
                case,
                "failure",
                message=f"declared {self.declared_level!r}, certified "
                f"{self.certified_level.value if self.certified_level else 'none'}",
            )
        return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, indent=2)
