"""``rcpkit index add|sync`` on real, messy folders the tests build, run as the user runs them
(a subprocess), then checked over the wire through ``rcpkit serve --stdio`` on the same data.

A bad file never stops a run and is reported; ids are stable whatever the path form or cwd;
``index sync`` mirrors a folder; empty documents are refused (§7.10: ``-32602`` on
``documents[i].text``); CSV values keep what the user wrote; links out of the folder are not
followed unless asked; PDF/HTML/DOCX go through the ``formats`` extra with pages cited.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import random
import signal
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from engine_wire import Engine, make_data_dir, rcpkit_argv

# Each test starts several CLI and server subprocesses.
pytestmark = pytest.mark.timeout(240)


def cli(*args: str, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``rcpkit ARGS`` as a subprocess; stdout and stderr captured as text."""
    return subprocess.run(rcpkit_argv(*args), cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "250", **(env or {})})


def summary(output: str) -> dict[str, str]:
    """The ``name value`` rows of the summary table."""
    rows = {}
    for line in output.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in ("added", "updated", "unchanged", "deleted",
                                             "warnings"):
            rows[words[0]] = words[1]
        elif len(words) == 3 and words[:2] == ["skipped", "files"]:
            rows["skipped"] = words[2]
    return rows


def assert_clean(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr


def doc_count(data: Path) -> int:
    stats = cli("index", "stats", "--data", str(data))
    assert stats.returncode == 0, stats.stderr
    line = next(line for line in stats.stdout.splitlines() if line.split()[:1] == ["documents"])
    return int(line.split()[1])


def hit_ids(engine: Engine, query: str, **options: Any) -> list[str]:
    return engine.ids(query, 50, mode="sparse", **options)


# ── one bad file never stops the run ────────────────────────────────────────

def _messy_folder(root: Path) -> Path:
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "good.md").write_text("# Beekeeping\n\nSmoke calms the bees before inspection.\n")
    (docs / "latin1.txt").write_bytes(
        "Le café est très chaud; les élèves préfèrent le thé glacé à midi.".encode("latin-1"))
    rng = random.Random(7)
    (docs / "binary.txt").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    paragraph = "Glaciers carve valleys and leave moraines behind them. " * 20 + "\n\n"
    (docs / "big.txt").write_text(paragraph * (1_050_000 // len(paragraph) + 1))
    (docs / "blank.txt").write_text("  \n\t\n")
    (docs / "prices.csv").write_text("id,text,price\np1,Copper kettle,3.5\n"
                                     "p2,Iron skillet,-7\n")
    (docs / "sub" / "bom.md").write_bytes("\ufeff# Fjäll\n\nFjällen är vackra.".encode())
    (docs / "photo.png").write_bytes(b"\x89PNG\r\n")
    return docs


def test_bad_files_are_reported_and_never_stop_the_run(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = _messy_folder(tmp_path)
    result = cli("index", "add", str(docs), "--data", str(data))
    assert_clean(result)
    assert result.returncode == 0, result.stderr
    rows = summary(result.stdout)
    # good, latin1, bom, 2 CSV rows, big split in two parts.
    assert rows["added"] == "7" and rows["skipped"] == "3", result.stdout
    for name, reason in (("binary.txt", "binary content"), ("blank.txt", "empty"),
                         ("photo.png", "unsupported file type")):
        assert any(name in line and reason in line for line in result.stdout.splitlines()), \
            result.stdout

    engine = Engine(data)
    try:
        latin = engine.retrieve("élèves thé glacé", 1, mode="sparse")["hits"][0]
        assert latin["id"] == "latin1.txt#0" and "très chaud" in latin["text"]
        second_part = hit_ids(engine, "moraines", filter={"field": "part", "op": "eq",
                                                          "value": 2})
        assert second_part and {i.split("#")[0] for i in second_part} == {"big.txt:part2"}
        kettle = engine.retrieve("copper kettle", 1, mode="sparse")["hits"][0]
        assert kettle["meta"]["price"] == 3.5
        assert engine.ids("skillet", 5, mode="sparse",
                          filter={"field": "price", "op": "lt", "value": 0}) == ["prices.csv:p2#0"]
        assert engine.retrieve("fjällen", 1, mode="sparse")["hits"][0]["citation"]["title"] \
            == "Fjäll"
    finally:
        engine.close()


def test_nothing_indexable_exits_1_and_strict_fails_on_any_skip(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    only_bad = tmp_path / "bad"
    only_bad.mkdir()
    (only_bad / "zeros.txt").write_bytes(b"\x00\x01\x02" * 100)
    nothing = cli("index", "add", str(only_bad), "--data", str(data))
    assert_clean(nothing)
    assert nothing.returncode == 1
    assert "rcpkit index add: error: nothing could be indexed" in nothing.stderr
    assert "zeros.txt" in nothing.stdout

    (only_bad / "fine.txt").write_text("a perfectly good note about tides")
    lenient = cli("index", "add", str(only_bad), "--data", str(data))
    assert lenient.returncode == 0 and summary(lenient.stdout)["added"] == "1"
    strict = cli("index", "add", str(only_bad), "--data", str(data), "--strict")
    assert strict.returncode == 1 and "--strict: 1 files skipped" in strict.stderr
    assert summary(strict.stdout)["unchanged"] == "1"


# ── stable ids ─────────────────────────────────────────────────────────────

def test_ids_are_the_same_whatever_the_path_form_or_cwd(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "work" / "docs"
    (docs / "nested").mkdir(parents=True)
    for i in range(3):
        (docs / f"note{i}.txt").write_text(f"note number {i} about lighthouses")
    (docs / "nested" / "deep.md").write_text("# Deep\n\nkelp forests")
    (docs / "rows.jsonl").write_text(json.dumps({"text": "a row with no id"}) + "\n"
                                     + json.dumps({"text": "another row"}) + "\n")
    (docs / "table.csv").write_text("text,lang\nno id here,en\nnor here,sv\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    first = cli("index", "add", "docs", "--data", str(data), cwd=docs.parent)
    assert first.returncode == 0 and summary(first.stdout)["added"] == "8", first.stdout
    for path, cwd in ((str(docs), elsewhere), ("./docs/", docs.parent),
                      (os.path.relpath(docs, elsewhere), elsewhere)):
        again = cli("index", "add", path, "--data", str(data), cwd=cwd)
        assert again.returncode == 0, again.stderr
        assert summary(again.stdout) | {"skipped": "0"} == {
            "added": "0", "updated": "0", "unchanged": "8", "skipped": "0",
            "warnings": "0"}, again.stdout
    assert doc_count(data) == 8

    # A folder inside the indexed root keeps that root's ids: no second copy.
    (docs / "nested" / "deep.md").write_text("# Deep\n\nkelp forests sway")
    inner = cli("index", "add", str(docs / "nested"), "--data", str(data))
    assert summary(inner.stdout) | {"skipped": "0"} == {
        "added": "0", "updated": "1", "unchanged": "0", "skipped": "0", "warnings": "0"}, \
        inner.stdout
    prefixed = cli("index", "add", str(docs / "nested"), "--data", str(data),
                   "--prefix", "kb/")
    assert prefixed.returncode == 2 and not prefixed.stdout
    assert f"run `rcpkit index add {docs / 'nested'} --data {data}` without" in prefixed.stderr
    engine = Engine(data)
    try:
        assert hit_ids(engine, "kelp forests") == ["nested/deep.md#0"]
        row_ids = hit_ids(engine, "row")
        assert len(row_ids) == 2 and all(i.startswith("rows.jsonl:") for i in row_ids)
    finally:
        engine.close()


# ── index sync ─────────────────────────────────────────────────────────────

def test_sync_mirrors_the_folder_and_touches_no_other_root(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    other = tmp_path / "other"
    docs.mkdir()
    other.mkdir()
    (docs / "keep.txt").write_text("tide tables predict high water")
    (docs / "edit.txt").write_text("the first draft about comets")
    (docs / "gone.txt").write_text("volcanoes erupt molten rock")
    (docs / "flaky.txt").write_text("sourdough starters need feeding")
    (other / "gone.txt").write_text("volcanoes in another folder")
    # Ids are relative to each root: a prefix keeps two roots' same-named files apart.
    assert cli("index", "add", str(other), "--data", str(data), "--prefix", "other/"
               ).returncode == 0
    first = cli("index", "sync", str(docs), "--data", str(data))
    assert first.returncode == 0 and summary(first.stdout)["added"] == "4", first.stdout

    (docs / "gone.txt").unlink()
    (docs / "edit.txt").write_text("the second draft about asteroids")
    (docs / "new.txt").write_text("auroras glow near the poles")
    (docs / "flaky.txt").write_bytes(b"\x00" * 64)  # unreadable this time: keep its document
    second = cli("index", "sync", str(docs), "--data", str(data))
    assert_clean(second)
    assert second.returncode == 0, second.stderr
    assert summary(second.stdout) == {"added": "1", "updated": "1", "unchanged": "1",
                                      "deleted": "1", "skipped": "1", "warnings": "0"}, \
        second.stdout
    engine = Engine(data)
    try:
        assert hit_ids(engine, "volcanoes") == ["other/gone.txt#0"]  # only the other root's
        assert engine.retrieve("volcanoes", 1, mode="sparse")["hits"][0]["text"] == \
            "volcanoes in another folder"
        assert hit_ids(engine, "comets") == [] and hit_ids(engine, "asteroids") == ["edit.txt#0"]
        assert hit_ids(engine, "sourdough") == ["flaky.txt#0"]
        assert hit_ids(engine, "auroras") == ["new.txt#0"]
    finally:
        engine.close()


# ── empty documents ────────────────────────────────────────────────────────

def test_empty_documents_are_refused_over_the_wire(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    engine = Engine(data)
    try:
        documents = [{"id": f"d{i}", "text": f"real text {i}"} for i in range(3)]
        for blank in ("", "   \n\t "):
            error = engine.error("index/add", {"documents": [*documents,
                                                             {"id": "d3", "text": blank}]})
            assert error["code"] == -32602 and error["data"]["field"] == "documents[3].text"
        assert engine.retrieve("real text", 10, mode="sparse")["hits"] == []  # nothing written
        engine.add(documents)
        packed = engine.retrieve("text", 10, mode="sparse", tokenBudget=50)
        assert {hit["id"] for hit in packed["hits"]} == {"d0#0", "d1#0", "d2#0"}
    finally:
        engine.close()


# ── CSV fidelity ───────────────────────────────────────────────────────────

def test_csv_keeps_leading_zeros_bom_and_decimals_and_warns_on_conflicts(
        tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    first = tmp_path / "first"
    second = tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "shops.csv").write_bytes(
        "\ufeffid,text,zip,rating,year\n"
        "s1,Bakery on the corner,01234,4.50,2021\n"
        "s2,Hardware store,98100,3,2019\n".encode())
    added = cli("index", "add", str(first), "--data", str(data))
    assert added.returncode == 0 and summary(added.stdout)["added"] == "2", added.stdout
    (second / "more.csv").write_text("id,text,year\ns3,Fishmonger by the harbour,unknown\n"
                                     "s4,Florist with tulips,2024\n")
    conflict = cli("index", "add", str(second), "--data", str(data))
    assert_clean(conflict)
    assert conflict.returncode == 0, conflict.stderr
    assert summary(conflict.stdout)["added"] == "2"
    assert summary(conflict.stdout)["warnings"] == "1"
    assert "indexed without 'year'" in conflict.stdout and "s3" in conflict.stdout

    engine = Engine(data)
    try:
        bakery = engine.retrieve("bakery corner", 1, mode="sparse")["hits"][0]
        assert bakery["id"] == "shops.csv:s1#0"  # the BOM did not hide the id column
        assert bakery["meta"]["zip"] == "01234" and bakery["meta"]["rating"] == 4.5
        assert engine.info["capabilities"]["filter"]["fields"]["zip"] == "keyword"
        assert hit_ids(engine, "fishmonger") == ["more.csv:s3#0"]
        assert engine.ids("florist", 5, mode="sparse",
                          filter={"field": "year", "op": "gte", "value": 2020}) == ["more.csv:s4#0"]
    finally:
        engine.close()


# ── symbolic links ─────────────────────────────────────────────────────────

def test_links_out_of_the_folder_are_skipped_unless_followed(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    secret = tmp_path / "outside"
    (secret / "dir").mkdir(parents=True)
    (secret / "passwd.txt").write_text("root:x:0:0:secret account line")
    (secret / "dir" / "inner.txt").write_text("another secret account file")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("a public note about accounts")
    (docs / "passwd.txt").symlink_to(secret / "passwd.txt")
    (docs / "linked-dir").symlink_to(secret / "dir", target_is_directory=True)
    (docs / "alias.txt").symlink_to(docs / "note.txt")

    result = cli("index", "add", str(docs), "--data", str(data))
    assert result.returncode == 0, result.stderr
    assert summary(result.stdout)["added"] == "1"
    out = result.stdout
    assert "passwd.txt" in out and "linked-dir" in out and "--follow-links" in out
    assert "alias.txt" in out and "indexed there" in out
    engine = Engine(data)
    try:
        assert hit_ids(engine, "secret") == []
    finally:
        engine.close()

    followed = cli("index", "add", str(docs), "--data", str(data), "--follow-links")
    assert followed.returncode == 0 and summary(followed.stdout)["added"] == "2"
    engine = Engine(data)
    try:
        assert sorted(hit_ids(engine, "secret")) == ["linked-dir/inner.txt#0", "passwd.txt#0"]
    finally:
        engine.close()


# ── progress, read commands, query output ──────────────────────────────────

def test_progress_counts_passages_and_read_commands_refuse_a_missing_index(
        tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "rows.jsonl").write_text("".join(
        json.dumps({"id": f"r{i}", "text": f"short document {i} about rivers"}) + "\n"
        for i in range(300)))
    result = cli("index", "add", str(docs), "--data", str(data), "--batch-size", "100")
    assert result.returncode == 0, result.stderr
    assert "300/300 documents · 300 passages embedded" in result.stdout

    found = cli("query", "rivers 7", "--data", str(data), "--mode", "sparse", "-k", "1")
    assert found.returncode == 0, found.stderr
    header = next(line for line in found.stdout.splitlines() if "confidence" in line)
    assert [cell.strip() for cell in header.split("┃")[1:4]] == ["#", "score", "confidence"]
    row = next(line for line in found.stdout.splitlines() if "rows.jsonl:r7#0" in line)
    confidence = float(row.split("│")[3])
    assert 0.0 <= confidence <= 1.0

    stats = cli("index", "stats", "--data", str(data))
    assert f"sqlite ({data.as_posix()})" in stats.stdout

    missing = tmp_path / "nowhere"
    for args in (("query", "x"), ("index", "stats")):
        refused = cli(*args, "--data", str(missing))
        assert refused.returncode == 2 and not refused.stdout
        assert refused.stderr.startswith(f"rcpkit {args[0]}") and "error: " in refused.stderr
        assert "no index here" in refused.stderr
    assert not missing.exists()


# ── recency and minScore on the advertised scale ───────────────────────────

def test_recency_blends_with_relevance(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    today = dt.date.today()
    # The same text: equally relevant under any fusion, so only their ages tell them apart.
    rows = [{"id": f"bee{i}", "text": "bees swarm from the hive, a colony note",
             "meta": {"date": (today - dt.timedelta(days=4 * 365 + i)).isoformat()}}
            for i in range(3)]
    rows += [{"id": f"news{i}", "text": f"today's market prices for grain and wool, item {i}",
              "meta": {"date": (today - dt.timedelta(days=i)).isoformat()}} for i in range(20)]
    (docs / "notes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli("index", "add", str(docs), "--data", str(data), "--global-ids").returncode == 0
    engine = Engine(data)
    try:
        plain = engine.ids("bees", 3)
        dated = engine.retrieve("bees", 3, recency={"field": "date", "halfLifeDays": 365})
        assert {h["id"] for h in dated["hits"]} == set(plain) == {"bee0#0", "bee1#0", "bee2#0"}
        # Between equally relevant hits, the newer wins.
        assert [h["id"] for h in dated["hits"]] == ["bee0#0", "bee1#0", "bee2#0"]
    finally:
        engine.close()


def test_min_score_works_on_the_advertised_default_scale(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(8):
        (docs / f"n{i}.txt").write_text(f"bees and honey {i}" if i < 3 else f"granite {i}")
    assert cli("index", "add", str(docs), "--data", str(data)).returncode == 0
    engine = Engine(data)
    try:
        retrieve = engine.info["capabilities"]["retrieve"]
        everything = engine.retrieve("bees honey", 8)["hits"]
        scores = [hit["score"] for hit in everything]
        floor = retrieve.get("scoreFloor")
        if floor is not None:
            assert min(scores) >= floor
        if retrieve.get("scoreScale") == "probability":
            assert all(0.0 <= s <= 1.0 for s in scores)
        threshold = (scores[0] + scores[-1]) / 2
        kept = engine.retrieve("bees honey", 8, minScore=threshold)["hits"]
        assert [h["id"] for h in kept] == [h["id"] for h in everything if h["score"] >= threshold]
        assert 0 < len(kept) < len(everything)
    finally:
        engine.close()


# ── formats ────────────────────────────────────────────────────────────────

def _pdf(pages: list[str]) -> bytes:
    """A small valid PDF with one line of Helvetica text per page (a real text layer)."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", ""]
    kids = []
    for text in pages:
        stream = zlib.compress(f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode())
        content = len(objects) + 2
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       f"/Resources << /Font << /F1 {len(pages) * 2 + 3} 0 R >> >> "
                       f"/Contents {content} 0 R >>")
        kids.append(f"{len(objects)} 0 R")
        objects.append((stream, len(stream)))  # type: ignore[arg-type]
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(pages)} >>"
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        if isinstance(body, tuple):
            data, size = body
            out += (f"{number} 0 obj\n<< /Length {size} /Filter /FlateDecode >>\nstream\n"
                    .encode() + data + b"\nendstream\nendobj\n")
        else:
            out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
            .encode())
    return bytes(out)


def test_pdf_html_docx_are_indexed_with_pages_cited(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    docx = pytest.importorskip("docx")
    pytest.importorskip("bs4")
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "manual.pdf").write_bytes(_pdf(["Unpacking the telescope", "Collimating mirrors",
                                            "Cleaning the eyepiece"]))
    (docs / "page.html").write_text(
        "<html><head><title>Kite flying</title><style>body{color:red}</style></head>"
        "<body><script>var kite = 'ignored';</script><h1>Kites</h1>"
        "<p>Launch kites with the wind at your back.</p></body></html>")
    word = docx.Document()
    word.core_properties.title = "Pottery glazes"
    word.add_heading("Glazes", 1)
    word.add_paragraph("Celadon glazes fire at high temperature.")
    word.save(str(docs / "glazes.docx"))
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")

    result = cli("index", "add", str(docs), "--data", str(data))
    assert_clean(result)
    assert result.returncode == 0, result.stderr
    assert summary(result.stdout)["added"] == "5"  # 3 pages, the page, the docx
    assert "broken.pdf" in result.stdout and "not a readable PDF" in result.stdout
    engine = Engine(data)
    try:
        mirror = engine.retrieve("collimating mirrors", 1, mode="sparse")["hits"][0]
        assert mirror["id"] == "manual.pdf:p2#0" and mirror["citation"]["page"] == 2
        assert mirror["citation"]["source"] == "manual.pdf"
        kite = engine.retrieve("launch kites wind", 1, mode="sparse")["hits"][0]
        assert kite["citation"]["title"] == "Kite flying" and "ignored" not in kite["text"]
        assert "color" not in kite["text"]
        glaze = engine.retrieve("celadon", 1, mode="sparse")["hits"][0]
        assert glaze["id"] == "glazes.docx#0"
        assert glaze["citation"]["title"] == "Pottery glazes"
    finally:
        engine.close()

    query = cli("query", "collimating mirrors", "--data", str(data), "--mode", "sparse",
                "-k", "1")
    assert "p. 2" in query.stdout


def test_formats_without_the_extra_say_what_to_install(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    for module in ("pypdf", "docx", "bs4"):
        (blocker / f"{module}.py").write_text(f"raise ImportError('no {module} here')\n")
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "manual.pdf").write_bytes(_pdf(["Telescope"]))
    (docs / "page.html").write_text("<p>kites</p>")
    (docs / "plain.txt").write_text("plain text still works")
    result = cli("index", "add", str(docs), "--data", str(data),
                 env={"PYTHONPATH": f"{blocker}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert_clean(result)
    assert result.returncode == 0, result.stderr
    assert summary(result.stdout)["added"] == "1"
    hint = next(line for line in result.stdout.splitlines()
                if "pip install 'rcpkit[formats]'" in line)
    assert hint.split("│")[2].strip() == "2" and "manual.pdf" in hint and "page.html" in hint


# ── every text file a user keeps ───────────────────────────────────────────

_MAN_PAGE = (".\\\" generated by hand\n.TH FROB 1 \"2024\" \"frob 1.0\"\n.SH NAME\n"
             "frob \\- frobnicate the \\fBwidgets\\fR\n.SH OPTIONS\n.TP\n"
             ".BR \\-v , \" \\-\\-verbose\"\nTalk about every widget.\n.de XX\n.ft B\n..\n")


def _user_folder(root: Path) -> Path:
    """What a documentation tree holds besides markdown: gzip'd changelogs and man pages,
    README/NEWS/COPYING without a suffix, rst/org/adoc, code, ignore files, a zip bomb."""
    docs = root / "docs"
    for sub in ("man", "src", "build", "vendor/keep"):
        (docs / sub).mkdir(parents=True)
    (docs / "changelog.Debian.gz").write_bytes(
        gzip.compress(b"frob (2.1) unstable\n\n  * Fixed the flux capacitor overflow.\n"))
    (docs / "man" / "frob.1.gz").write_bytes(gzip.compress(_MAN_PAGE.encode()))
    (docs / "README").write_text("This project indexes honey recipes.\n")
    (docs / "NEWS").write_bytes("Nouvelles: le thé glacé arrive.\n".encode("latin-1"))
    (docs / "COPYING").write_text("GNU GENERAL PUBLIC LICENSE, version 3, about freedom\n")
    (docs / "guide.rst").write_text("Glacier Guide\n=============\n\nGlaciers carve fjords.\n")
    (docs / "notes.org").write_text("#+TITLE: Kelp Notes\n* Forests\nKelp grows fast.\n")
    (docs / "book.adoc").write_text("= Comet Book\n\nComets have tails.\n")
    (docs / "src" / "frob.py").write_text("def frobnicate():\n    return 'sprockets'\n")
    (docs / "data.bin").write_bytes(bytes(range(256)) * 4)
    (docs / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (docs / "blob").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(64))
    (docs / "bomb.txt.gz").write_bytes(gzip.compress(b"\0" * (65 * 2**20)))
    (docs / "broken.gz").write_bytes(b"\x1f\x8b\x08 not gzip at all")
    (docs / ".gitignore").write_text("build/\n*.log\nvendor/\n")
    (docs / ".rcpkitignore").write_text("drafts-*\n")
    (docs / "build" / "out.txt").write_text("generated output about widgets")
    (docs / "debug.log").write_text("log line about widgets")
    (docs / "drafts-1.md").write_text("# Draft\n\nunfinished widgets")
    (docs / "vendor" / "keep" / "lib.txt").write_text("vendored widgets")
    (docs / ".cache").mkdir()
    (docs / ".cache" / "x.txt").write_text("hidden widgets")
    return docs


def test_every_text_file_is_indexed_and_skips_are_grouped_with_a_full_list(
        tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = _user_folder(tmp_path)
    listing = tmp_path / "skipped.tsv"
    result = cli("index", "add", str(docs), "--data", str(data), "--skipped", str(listing))
    assert_clean(result)
    assert result.returncode == 0, result.stderr
    # changelog, man page, README, NEWS, COPYING, rst, org, adoc, code.
    assert summary(result.stdout)["added"] == "9", result.stdout
    skipped = dict(line.split("\t") for line in listing.read_text().splitlines())
    assert skipped == {
        "build/": "ignored by .gitignore", "debug.log": "ignored by .gitignore",
        "vendor/": "ignored by .gitignore", "drafts-1.md": "ignored by .rcpkitignore",
        ".cache/": "hidden (name starts with '.')",
        "pic.png": "unsupported file type .png (image/png)",
        "data.bin": "unsupported file type .bin (application/octet-stream)",
        "blob": "binary content, not text",
        "bomb.txt.gz": f"decompresses to more than {64 * 2**20} bytes (the limit)",
        "broken.gz": skipped["broken.gz"]}, skipped
    assert skipped["broken.gz"].startswith("not a readable gzip file")
    groups = {line.split("│")[1].strip(): line.split("│")[2].strip()
              for line in result.stdout.splitlines() if line.count("│") == 4}
    assert groups["ignored by .gitignore or .rcpkitignore"] == "4"
    assert groups["unsupported file type"] == "2" and groups["binary content, not text"] == "1"
    assert summary(result.stdout)["skipped"] == "10"

    engine = Engine(data)
    try:
        man = engine.retrieve("frobnicate widgets verbose", 1, mode="sparse")["hits"][0]
        assert man["id"] == "man/frob.1.gz#0" and man["citation"]["title"] == "FROB(1)"
        assert "frob - frobnicate the widgets" in man["text"] and "-v, --verbose" in man["text"]
        assert "\\f" not in man["text"] and ".TH" not in man["text"] and ".ft" not in man["text"]
        assert hit_ids(engine, "flux capacitor") == ["changelog.Debian.gz#0"]
        assert hit_ids(engine, "honey recipes") == ["README#0"]
        assert engine.retrieve("glacé", 1, mode="sparse")["hits"][0]["id"] == "NEWS#0"
        assert hit_ids(engine, "freedom") == ["COPYING#0"]
        titles = {engine.retrieve(q, 1, mode="sparse")["hits"][0]["citation"]["title"]
                  for q in ("fjords", "kelp", "tails")}
        assert titles == {"Glacier Guide", "Kelp Notes", "Comet Book"}
        code = engine.ids("sprockets", 5, mode="sparse",
                          filter={"field": "language", "op": "eq", "value": "python"})
        assert code == ["src/frob.py#0"]
        assert hit_ids(engine, "widgets") == ["man/frob.1.gz#0"]  # nothing ignored leaked
    finally:
        engine.close()


def test_include_exclude_and_no_ignore_files(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = _user_folder(tmp_path)
    only = cli("index", "add", str(docs), "--data", str(data), "--include", "*.rst",
               "--include", "man/", "--exclude", "*.org")
    assert_clean(only)
    assert only.returncode == 0 and summary(only.stdout)["added"] == "2", only.stdout
    engine = Engine(data)
    try:
        assert hit_ids(engine, "fjords") == ["guide.rst#0"] and hit_ids(engine, "kelp") == []
        assert hit_ids(engine, "frobnicate") == ["man/frob.1.gz#0"]
    finally:
        engine.close()
    everything = cli("index", "add", str(docs), "--data", str(data), "--no-ignore-files",
                     "--exclude", "*.gz", "--exclude", "src/")
    assert everything.returncode == 0, everything.stderr
    engine = Engine(data)
    try:
        assert {"vendor/keep/lib.txt#0", "build/out.txt#0", "debug.log#0",
                "drafts-1.md#0"} <= set(hit_ids(engine, "widgets"))
        assert hit_ids(engine, "sprockets") == [] and hit_ids(engine, "flux") == []
    finally:
        engine.close()


def test_sync_drops_what_the_user_now_ignores(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keep.txt").write_text("tide tables")
    (docs / "scratch.txt").write_text("scratch notes about comets")
    assert cli("index", "sync", str(docs), "--data", str(data)).returncode == 0
    (docs / ".rcpkitignore").write_text("scratch.txt\n")
    second = cli("index", "sync", str(docs), "--data", str(data))
    assert second.returncode == 0 and summary(second.stdout)["deleted"] == "1", second.stdout


# ── ids that do not duplicate ──────────────────────────────────────────────

def test_nested_roots_reuse_ids_or_are_refused_with_the_command_that_works(
        tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "top.txt").write_text("lighthouses on the cape")
    (docs / "sub" / "a.txt").write_text("kelp forests sway")
    (docs / "sub" / "b.txt").write_text("otters crack shells")
    assert cli("index", "add", str(docs / "sub"), "--data", str(data)).returncode == 0
    # A file given by name is read alone, whatever roots lie below its folder; its folder
    # becomes a root all the same, which must not let that folder be read whole later.
    alone = cli("index", "add", str(docs / "top.txt"), "--data", str(data))
    assert alone.returncode == 0 and summary(alone.stdout)["added"] == "1", alone.stderr

    holder = cli("index", "add", str(docs), "--data", str(data))
    assert holder.returncode == 2 and not holder.stdout
    suggested = f"`rcpkit index add {docs} --exclude sub/ --data {data}`"
    assert suggested in holder.stderr, holder.stderr
    around = cli(*suggested.strip("`").split()[1:])
    assert around.returncode == 0 and summary(around.stdout)["unchanged"] == "1", around.stdout

    # Syncing the inner folder again deletes only within it, under its own ids.
    (docs / "sub" / "b.txt").unlink()
    synced = cli("index", "sync", str(docs / "sub"), "--data", str(data))
    assert summary(synced.stdout)["deleted"] == "1", synced.stdout
    engine = Engine(data)
    try:
        assert hit_ids(engine, "kelp") == ["a.txt#0"] and hit_ids(engine, "otters") == []
        assert hit_ids(engine, "lighthouses") == ["top.txt#0"]
        labels = {hit["meta"]["source_root"]
                  for hit in engine.retrieve("kelp lighthouses", 10, mode="sparse")["hits"]}
        assert labels == {"sub", "docs"}
    finally:
        engine.close()
    assert doc_count(data) == 2


def test_csv_ids_are_scoped_to_their_file_unless_global(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "tables"
    docs.mkdir()
    (docs / "birds.csv").write_text("id,text\n1,Puffins nest on cliffs\n2,Terns dive\n")
    (docs / "fish.csv").write_text("id,text\n1,Cod school in cold water\n2,Eels migrate\n")
    (docs / "more.jsonl").write_text(json.dumps({"id": 1, "text": "Seals haul out"}) + "\n")
    scoped = cli("index", "add", str(docs), "--data", str(data))
    assert scoped.returncode == 0 and summary(scoped.stdout)["added"] == "5", scoped.stdout
    engine = Engine(data)
    try:
        assert hit_ids(engine, "puffins") == ["birds.csv:1#0"]
        assert hit_ids(engine, "cod") == ["fish.csv:1#0"]
        assert hit_ids(engine, "seals") == ["more.jsonl:1#0"]
    finally:
        engine.close()

    other = make_data_dir(tmp_path / "global")
    shared = cli("index", "add", str(docs), "--data", str(other), "--global-ids")
    assert shared.returncode == 0 and summary(shared.stdout)["warnings"] == "3", shared.stdout
    assert "id '1' also in birds.csv; the later one is kept" in shared.stdout
    assert doc_count(other) == 2


def test_source_root_is_a_label_never_a_host_path(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    first = tmp_path / "site-a" / "docs"
    second = tmp_path / "site-b" / "docs"
    for folder, text in ((first, "alpine meadows bloom"), (second, "desert cacti bloom")):
        folder.mkdir(parents=True)
        (folder / "note.txt").write_text(text)
    assert cli("index", "add", str(first), "--data", str(data)).returncode == 0
    clash = cli("index", "add", str(second), "--data", str(data))
    assert clash.returncode == 2
    assert f"`rcpkit index add {second} --source-root NAME --data {data}`" in clash.stderr
    labelled = cli("index", "add", str(second), "--data", str(data), "--source-root", "site-b",
                   "--prefix", "b/")
    assert labelled.returncode == 0, labelled.stderr
    engine = Engine(data)
    try:
        hits = engine.retrieve("bloom", 10, mode="sparse")["hits"]
        assert {(h["id"], h["meta"]["source_root"]) for h in hits} == {
            ("note.txt#0", "docs"), ("b/note.txt#0", "site-b")}
        assert str(tmp_path) not in json.dumps(hits)
    finally:
        engine.close()
    roots = json.loads((data / "roots.json").read_text())["roots"]
    assert {(r["label"], r["path"]) for r in roots} == {("docs", first.as_posix()),
                                                        ("site-b", second.as_posix())}


def test_read_commands_write_nothing(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(5):
        (docs / f"n{i}.txt").write_text(f"harbour note {i} about tides")
    assert cli("index", "add", str(docs), "--data", str(data)).returncode == 0

    def state() -> dict[str, tuple[int, int]]:
        return {path.relative_to(data).as_posix(): (path.stat().st_mtime_ns, path.stat().st_size)
                for path in sorted(data.rglob("*"))}

    before = state()
    stats = cli("index", "stats", "--data", str(data))
    assert stats.returncode == 0 and stats.stderr == "opening the index…\n", stats.stderr
    for mode in ("sparse", "hybrid"):
        found = cli("query", "tides", "--data", str(data), "--mode", mode)
        assert found.returncode == 0 and "saving" not in found.stderr, found.stderr
    assert state() == before


# ── progress and Ctrl-C ────────────────────────────────────────────────────

def _many_rows(docs: Path, count: int) -> None:
    docs.mkdir()
    (docs / "rows.jsonl").write_text("".join(
        json.dumps({"id": f"r{i}", "text": f"note {i} about estuaries and salt marshes"}) + "\n"
        for i in range(count)))


def test_piped_progress_starts_at_the_first_passage(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    _many_rows(tmp_path / "docs", 200)
    result = cli("index", "add", str(tmp_path / "docs"), "--data", str(data))
    assert result.returncode == 0, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("indexing: ")]
    # Per passage, not per batch: the first line comes after one passage of a 64-row batch.
    assert progress and progress[0].startswith("indexing: 1/200 documents · 1 passages"), \
        result.stderr


def test_ctrl_c_commits_what_it_says_and_the_same_command_resumes(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    _many_rows(docs, 3000)
    argv = rcpkit_argv("index", "add", str(docs), "--data", str(data), "--batch-size", "10")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "COLUMNS": "250"}) as process:
        assert process.stderr is not None
        for line in process.stderr:
            if line.startswith("indexing: "):
                process.send_signal(signal.SIGINT)
                break
        out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in out + err
    stopped = next(line for line in err.splitlines() if line.startswith("interrupted: "))
    committed = int(stopped.split()[1])
    assert 0 < committed < 3000 and f"{committed} of 3000 documents committed" in stopped
    assert "same `rcpkit index add` again to resume" in stopped
    assert doc_count(data) == committed
    again = cli("index", "add", str(docs), "--data", str(data))
    assert again.returncode == 0, again.stderr
    assert summary(again.stdout)["unchanged"] == str(committed)
    assert summary(again.stdout)["added"] == str(3000 - committed)
