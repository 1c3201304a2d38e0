"""docs/zoo.md, the architecture sweep's table (see zoo.py): a section per library, rewritten
only for the libraries a run swept, and the counts over all of them at the top. A section's
rows for architectures a run did not reach are kept, so a sweep may resume on another machine."""
import datetime
import os
import re


def summary(results):
    """The counts of one library's rows."""
    # Of those that pass at one size and whose dynamic export torch manages.
    static_pass = [r for r in results if r["static"][0] == "PASS" and r["dynamic"][0] != "EXPORT"]
    both = [r for r in static_pass if r["dynamic"][0] == "PASS"]
    count = lambda col, o: sum(1 for r in results if r[col][0] == o)
    text = (f"**{len(results)} architectures.** Static: {count('static', 'PASS')} PASS, "
            f"{count('static', 'REFUSED')} REFUSED, {count('static', 'WRONG')} WRONG, {count('static', 'CRASH')} CRASH, "
            f"{count('static', 'EXPORT')} export failures or not swept. Dynamic: {count('dynamic', 'PASS')} PASS, "
            f"{count('dynamic', 'REFUSED')} REFUSED, {count('dynamic', 'WRONG')} WRONG, "
            f"{count('dynamic', 'CRASH')} CRASH, {count('dynamic', 'EXPORT')} export failures or not swept. Of the "
            f"{len(static_pass)} that pass at one size and export with dynamic sizes, **{len(both)} "
            f"({100.0 * len(both) / max(1, len(static_pass)):.1f}%) pass with dynamic sizes**.")
    sided = [r for r in results if sides_of(r)[0] not in ("—", "untried")]
    if not sided:
        return text
    tried = [r for r in sided if r["static"][0] == "PASS" and sides_of(r)[0] != "EXPORT"]
    passed = [r for r in tried if sides_of(r)[0] == "PASS"]
    count = lambda o: sum(1 for r in sided if sides_of(r)[0] == o)
    return (text + f" More dims (image sides, encoder and decoder lengths; {len(sided)} models with them, swept): "
            f"{count('PASS')} PASS, {count('REFUSED')} REFUSED, {count('WRONG')} WRONG, {count('CRASH')} CRASH, "
            f"{count('EXPORT')} export failures; of the {len(tried)} that pass at one size and export with them "
            f"dynamic, **{len(passed)} ({100.0 * len(passed) / max(1, len(tried)):.1f}%) pass with them dynamic**.")


def sides_of(r):
    """A row's more-dims verdict (kept under the key `sides`, its first kind): `untried` for rows
    swept before the sweep had them."""
    return r.get("sides") or ["untried", ""]


# A row; its more-dims column (an outcome, or "—" for a model without such dims) is absent from the
# rows of tables written before it was recorded (`OLD_ROW`, under a header without it), its TPU
# column ("yes": also compiled for `tpu:v6e:1x1`; "—": nothing to compile) from older ones still.
ROW = re.compile(r"^\| ([^|]+) \| `([^`]*)` \| (\w+) \| (\w+) \| (\w+|—) \| (yes|no|—|\?) \| ?(.*?) ?\|$")
OLD_ROW = re.compile(r"^\| ([^|]+) \| `([^`]*)` \| (\w+) \| (\w+) \|(?: (yes|no|—|\?) \|)? ?(.*?) ?\|$")
TPU_MARK = {True: "yes", False: "no", None: "?"}


def table_rows(lines):
    """(task, type, static, dynamic, sides, tpu, why) of each row of a table; `sides` is
    "untried" and `tpu` "?" where the row does not say."""
    rows, with_sides = [], False
    for line in lines:
        if line.startswith("| task | type |"):
            with_sides = "| more dims |" in line or "| sides |" in line
        elif with_sides and (m := ROW.match(line)):
            rows.append(m.groups())
        elif not with_sides and (m := OLD_ROW.match(line)):
            t, model, static, dynamic, tpu, why = m.groups()
            rows.append((t, model, static, dynamic, "untried", tpu or "?", why))
    return rows


def tabled(path):
    """The rows of the table at `path`: (task, type) to (static, dynamic, tpu)."""
    if not os.path.exists(path):
        return {}
    return {(task, model): (s, d, tpu) for task, model, s, d, _, tpu, _ in table_rows(open(path).read().splitlines())}


def kept_results(body, results):
    """The rows of an existing section for architectures `results` does not hold (swept on an
    earlier run, perhaps on another machine), as results; `kept` marks them."""
    fresh = {(r["task"], r["type"]) for r in results}
    tpu = {"yes": True, "no": False}
    return [{"task": t, "type": m, "static": [s, why.replace("\\|", "|")], "dynamic": [d, ""],
             **({"sides": [sides, ""]} if sides != "untried" else {}), "kept": True, "tpu": tpu.get(mark)}
            for t, m, s, d, sides, mark, why in table_rows(body) if (t, m) not in fresh]


def kept_sections(path, libraries):
    """The sections of an existing table, by library: `## <library>` to the next heading."""
    if not os.path.exists(path):
        return {}
    sections, current = {}, None
    for line in open(path).read().splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = [line]
        elif current:
            sections[current].append(line)
    return {k: v for k, v in sections.items() if k in libraries}


def section(library, results, versions, planned, paragraph):
    kept = sum(1 for r in results if r.get("kept"))
    earlier = f" ({kept} rows are kept from an earlier run)" if kept else ""
    lines = [
        f"## {library}",
        "",
        f"Run on {datetime.date.today().isoformat()} with {versions}{earlier}. " + paragraph,
        "",
        ("" if len(results) >= planned else f"**A partial run: {len(results)} of the {planned} architectures "
         "so far** (the sweep resumes where it stopped). ") + summary(results),
        "",
        "| task | type | static | dynamic | more dims | TPU | why (static / dynamic / more dims) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["task"], r["type"])):
        sides = sides_of(r)
        why = " / ".join(x for x in (r["static"][1], r["dynamic"][1], sides[1]) if x)
        why = why.replace("|", "\\|").replace("\n", " ")
        compiled = "PASS" in (r["static"][0], r["dynamic"][0], sides[0])
        tpu = TPU_MARK[r.get("tpu")] if compiled else "—"
        lines.append(f"| {r['task']} | `{r['type']}` | {r['static'][0]} | {r['dynamic'][0]} | {sides[0]} | {tpu} | "
                     f"{why} |")
    return lines + [""]


def totals(sections):
    """The counts over every library: the table at the top."""
    lines = [
        "| library | architectures | export fails | static PASS (of those that export) | static REFUSED | "
        "dynamic PASS (of static PASS that export dynamic) | dynamic REFUSED | more dims PASS (of static PASS "
        "that export them) | WRONG (any) | CRASH (any) | compiled for TPU (of those that compile) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    everything = []
    for library, body in sections.items():
        rows = table_rows(body)
        everything += rows
        lines.append(totals_row(library, rows))
    return lines + [totals_row("**all**", everything)]


def totals_row(name, rows):
    count = lambda col, o: sum(1 for r in rows if r[col] == o)
    either = lambda o: sum(1 for r in rows if o in (r[2], r[3], r[4]))
    exported = len(rows) - count(2, "EXPORT")
    both = sum(1 for r in rows if r[2] == "PASS" and r[3] == "PASS")
    dynamic = sum(1 for r in rows if r[2] == "PASS" and r[3] != "EXPORT")
    sided = [r for r in rows if r[2] == "PASS" and r[4] not in ("—", "untried", "EXPORT")]
    share = lambda n, d: f"{n} ({100.0 * n / max(1, d):.1f}%)"
    compiled = [r for r in rows if "PASS" in (r[2], r[3], r[4])]
    tpu = sum(1 for r in compiled if r[5] == "yes")
    unknown = sum(1 for r in compiled if r[5] == "?")
    tpu_cell = f"{tpu} of {len(compiled)}" + (f" ({unknown} not recorded)" if unknown else "")
    untried = count(4, "untried")
    sides_cell = share(sum(1 for r in sided if r[4] == "PASS"), len(sided)) if sided else "—"
    sides_cell += f"; {untried} untried" if untried else ""
    return (f"| {name} | {len(rows)} | {count(2, 'EXPORT')} | {share(count(2, 'PASS'), exported)} | "
            f"{count(2, 'REFUSED')} | {share(both, dynamic)} | {count(3, 'REFUSED')} | {sides_cell} | "
            f"{either('WRONG')} | {either('CRASH')} | {tpu_cell} |")


def write_table(results, path, versions, planned, libraries, describe):
    """Rewrites the sections of the libraries in `results` (`libraries`: each library's tasks, in
    the table's order; `describe(library, rows)`: the paragraph above its table); keeps the
    others as they are."""
    sections = kept_sections(path, libraries)
    for library, tasks in libraries.items():
        mine = [r for r in results if r["task"] in tasks]
        if mine:
            mine += kept_results(sections.get(library, []), mine)
            paragraph = describe(library, mine)
            sections[library] = section(library, mine, versions[library], planned[library], paragraph)
    sections = {lib: sections[lib] for lib in libraries if lib in sections}
    lines = [
        "# The architecture sweep",
        "",
        "`cargo xtask zoo` (`testdata/zoo.py`) exports random-init instances of every architecture of the "
        "libraries below with torch.export — at one size (non-strict, then strict) and with dynamic sizes —, "
        "compiles each with torchtpu-compile, runs it on CPU and compares it with eager. Each library's section "
        "says when it was swept, with which versions and how. Outcomes: EXPORT (torch.export failed, or the program it wrote differs from eager: torch's "
        "error), PASS (equal to eager at every size tried), REFUSED (the compiler refused, naming the op and "
        "why), WRONG (a result differs from eager, or a size the export's guards exclude was run), CRASH (a "
        "panic, an abort, a signal or a hang). More dims, the dims beyond batch and sequence: the models whose "
        "input is an image (or image-like latents) exported again with a dynamic height and width (`Dim.AUTO`, "
        "half to twice the side; a multiple of 32, 16 or 8 where torch wants one), run at up to 10 pairs of "
        "sides; encoder-decoders exported again at batch 1 with the encoder's and the decoder's lengths apart "
        "(`Dim.AUTO` over 2..64 each), run at up to 11 pairs of lengths; each at the sizes the loaded program "
        "accepts, and refusing up to 2 its guards exclude; `—` for models without such dims, `untried` for "
        "rows swept before the sweep had them (`--add-sides`). "
        "Percentages of static PASS are of the archives that export. TPU: `yes` where the archives that "
        "compile were also compiled for `tpu:v6e:1x1` (libtpu; no TPU needed), `no` where the run compiled for "
        "CPU only (`--no-tpu`), `?` for rows kept from runs before the table recorded it.",
        "",
        *totals(sections),
        "",
    ]
    for body in sections.values():
        lines += body
    open(path, "w").write("\n".join(lines).rstrip("\n") + "\n")
