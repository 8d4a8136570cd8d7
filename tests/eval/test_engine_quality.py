"""The CI evaluation: the embedded engine on the FAQ, through the RCP wire."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from support.quality import assert_faq_quality

pytest.importorskip("zaragoza_construction_faq")
pytestmark = [pytest.mark.slow, pytest.mark.wire]


async def test_engine_quality_on_the_faq_over_stdio(tmp_path: Path) -> None:
    await assert_faq_quality(shlex.join([
        sys.executable, "-c", "from rcpkit.cli import main; main()",
        "serve", "--stdio", "--create", "--data", str(tmp_path / "faq")]))
