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
    return (f"**{len(results)} architectures.** Static: {count('static', 'PASS')} PASS, {count('static', 'REFUSED')} "
            f"REFUSED, {count('static', 'WRONG')} WRONG, {count('static', 'CRASH')} CRASH, "
            f"{count('static', 'EXPORT')} export failures or not swept. Dynamic: {count('dynamic', 'PASS')} PASS, "
            f"{count('dynamic', 'REFUSED')} REFUSED, {count('dynamic', 'WRONG')} WRONG, "
            f"{count('dynamic', 'CRASH')} CRASH, {count('dynamic', 'EXPORT')} export failures or not swept. Of the "
            f"{len(static_pass)} that pass at one size and export with dynamic sizes, **{len(both)} "
            f"({100.0 * len(both) / max(1, len(static_pass)):.1f}%) pass with dynamic sizes**.")


# A row; its TPU column ("yes": also compiled for `tpu:v6e:1x1`; "—": nothing to compile) is absent
# from the rows of tables written before it was recorded.
ROW = re.compile(r"^\| ([^|]+) \| `([^`]*)` \| (\w+) \| (\w+) \|(?: (yes|no|—|\?) \|)? ?(.*?) ?\|$")
TPU_MARK = {True: "yes", False: "no", None: "?"}


def table_rows(lines):
    """(task, type, static, dynamic, tpu, why) of each row of a table; `tpu` is "?" where the
    row does not say."""
    return [(t, m, s, d, tpu or "?", why) for t, m, s, d, tpu, why in (r.groups() for r in map(ROW.match, lines) if r)]


def tabled(path):
    """The rows of the table at `path`: (task, type) to (static, dynamic, tpu)."""
    if not os.path.exists(path):
        return {}
    return {(task, model): (s, d, tpu) for task, model, s, d, tpu, _ in table_rows(open(path).read().splitlines())}


def kept_results(body, results):
    """The rows of an existing section for architectures `results` does not hold (swept on an
    earlier run, perhaps on another machine), as results; `kept` marks them."""
    fresh = {(r["task"], r["type"]) for r in results}
    tpu = {"yes": True, "no": False}
    return [{"task": t, "type": m, "static": [s, why.replace("\\|", "|")], "dynamic": [d, ""], "kept": True,
             "tpu": tpu.get(mark)} for t, m, s, d, mark, why in table_rows(body) if (t, m) not in fresh]


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
        "| task | type | static | dynamic | TPU | why (static / dynamic) |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["task"], r["type"])):
        why = " / ".join(x for x in (r["static"][1], r["dynamic"][1]) if x).replace("|", "\\|").replace("\n", " ")
        compiled = "PASS" in (r["static"][0], r["dynamic"][0])
        tpu = TPU_MARK[r.get("tpu")] if compiled else "—"
        lines.append(f"| {r['task']} | `{r['type']}` | {r['static'][0]} | {r['dynamic'][0]} | {tpu} | {why} |")
    return lines + [""]


def totals(sections):
    """The counts over every library: the table at the top."""
    lines = [
        "| library | architectures | export fails | static PASS (of those that export) | static REFUSED | "
        "dynamic PASS (of static PASS that export dynamic) | dynamic REFUSED | WRONG (either) | CRASH (either) | "
        "compiled for TPU (of those that compile) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    everything = []
    for library, body in sections.items():
        rows = table_rows(body)
        everything += rows
        lines.append(totals_row(library, rows))
    return lines + [totals_row("**all**", everything)]


def totals_row(name, rows):
    count = lambda col, o: sum(1 for r in rows if r[col] == o)
    either = lambda o: sum(1 for r in rows if o in (r[2], r[3]))
    exported = len(rows) - count(2, "EXPORT")
    both = sum(1 for r in rows if r[2] == "PASS" and r[3] == "PASS")
    dynamic = sum(1 for r in rows if r[2] == "PASS" and r[3] != "EXPORT")
    share = lambda n, d: f"{n} ({100.0 * n / max(1, d):.1f}%)"
    compiled = [r for r in rows if "PASS" in (r[2], r[3])]
    tpu = sum(1 for r in compiled if r[4] == "yes")
    unknown = sum(1 for r in compiled if r[4] == "?")
    tpu_cell = f"{tpu} of {len(compiled)}" + (f" ({unknown} not recorded)" if unknown else "")
    return (f"| {name} | {len(rows)} | {count(2, 'EXPORT')} | {share(count(2, 'PASS'), exported)} | "
            f"{count(2, 'REFUSED')} | {share(both, dynamic)} | {count(3, 'REFUSED')} | {either('WRONG')} | "
            f"{either('CRASH')} | {tpu_cell} |")


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
        "why), WRONG (a result differs from eager), CRASH (a panic, an abort, a signal or a hang). "
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
