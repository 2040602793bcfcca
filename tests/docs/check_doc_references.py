#!/usr/bin/env python3
"""Checks that the repository's cross-references resolve.

Source comments, READMEs and docs cite measurements as  docs/NAME.md "Section title"  (the title may be
cut short and may wrap over comment lines), link Markdown files with  [text](path), and name files under
docs/ by path; an index table (a Markdown table with a "section" column) names sections of its own file, and
a bare  section "Title"  in a Markdown file names a section of that file or of another file under docs/.
A Markdown file (README.md, a provider's README, a page under docs/) that names a file by a path with a folder
and an extension (abi/include/kpr/ggml_blocks.h, ../config/default.toml) must name one that exists, relative
to the repository root, to the Markdown file's folder, or to an include folder (abi/include, core/include:
kpr/provider.h).
When a document is split or a section renamed, those references rot silently; this check makes them fail a
test instead.

  check_doc_references.py --root DIR     check the tree at DIR; exit 1 and list every broken reference
  check_doc_references.py --self-test    build a small tree with one reference of each kind broken and
                                         one of each kind sound, and check that exactly the broken ones
                                         are reported (so the check itself cannot pass vacuously)

Scanned: *.md outside build folders and outside docs/measurements/ (raw run logs quote history as it
was), and the C, C++, CUDA, CMake, Python and shell sources under core/, providers/, bench/, tests/,
fuzz/, examples/, scripts/ and abi/.
"""
import argparse
import os
import re
import sys
import tempfile

SOURCE_DIRS = ("core", "providers", "bench", "tests", "fuzz", "examples", "scripts", "abi", "cmake")
SOURCE_EXTS = (".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".inc", ".txt", ".cmake", ".py", ".sh")
SKIP_DIRS = {".git", "measurements", "data", "__pycache__"}

# docs/NAME.md (or `docs/NAME.md`), then "," or a space, optionally "(section" or "section", then a quoted title.
CITATION = re.compile(r'(docs/[A-Za-z0-9_.-]+\.md)`?(?:,\s*|\s+)\(?(?:sections?\s+)?"([^"\n]{3,200})"')
# further titles of the same citation: ... "A" and "B", ... "A", "B"
MORE_TITLES = re.compile(r'\s*(?:,|and|,\s*and)\s*"([^"\n]{3,200})"')
# a bare  section "Title"  in a Markdown file (no file named before it)
BARE_SECTION = re.compile(r'(?<![\w/.-]\.md )(?<!\.md`)(?<!\.md, )\(?\bsection "([^"\n]{3,200})"')
MD_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
DOC_PATH = re.compile(r"(?<![\w/.-])(docs/[A-Za-z0-9_./-]+\.(?:md|txt|patch))")
# a file path with at least one folder and a known extension, not part of a longer token or a placeholder
REPO_PATH = re.compile(r"(?<![\w/.$<>~*-])((?:\.\./)*(?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+"
                       r"\.(?:md|h|hpp|c|cc|cpp|cu|cuh|inc|toml|py|json|cmake|txt|sh))(?![\w/-])")
INCLUDE_DIRS = ("abi/include", "core/include")
COMMENT_PREFIX = re.compile(r"\n[ \t]*(?://+|#+|\*|>)?[ \t]*")


def flatten(text):
    """Joins lines (dropping comment markers) so that a citation wrapped over lines reads as one."""
    return re.sub(r"\s+", " ", COMMENT_PREFIX.sub(" ", text))


def headings(text):
    return [re.sub(r"\s+", " ", l.lstrip("#").strip()) for l in text.split("\n") if l.startswith("#")]


def names_heading(heads, title):
    """Whether title (possibly cut short) names one of heads."""
    t = re.sub(r"\s+", " ", title.strip()).rstrip(".")
    return t in ("...", "…") or any(t in h for h in heads)  # "...": a placeholder in prose about citations


def files_to_scan(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        top = rel.split(os.sep)[0]
        dirnames[:] = [d for d in dirnames
                       if d not in SKIP_DIRS and not d.startswith("build") and not d.startswith(".")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if name.endswith(".md"):
                yield path
            elif top in SOURCE_DIRS and (name.endswith(SOURCE_EXTS) or name == "CMakeLists.txt"):
                yield path


def check_section_columns(rel, text, own):
    """A Markdown table whose header has a "section" column (an index) must name sections of the same file."""
    problems, column = [], None
    for line in text.split("\n"):
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index("section") if "section" in cells else -1
            continue
        if column < 0 or column >= len(cells) or set(cells[column]) <= set("-: "):
            continue
        if cells[column] not in own:
            problems.append(f'{rel}: its index names section "{cells[column]}", which it does not have')
    return problems


def check(root):
    problems = []
    heading_cache = {}

    def title_ok(doc, title):
        target = os.path.join(root, doc)
        if not os.path.isfile(target):
            return False
        if doc not in heading_cache:
            with open(target, encoding="utf-8") as f:
                heading_cache[doc] = headings(f.read())
        return names_heading(heading_cache[doc], title)

    docs_dir = os.path.join(root, "docs")
    all_docs = sorted(os.path.join("docs", n) for n in os.listdir(docs_dir) if n.endswith(".md")) \
        if os.path.isdir(docs_dir) else []
    for path in sorted(files_to_scan(root)):
        rel = os.path.relpath(path, root)
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue  # its docstring and self-test name references that are broken on purpose
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError) as e:
            problems.append(f"{rel}: cannot read: {e}")
            continue
        flat = flatten(text)
        for m in CITATION.finditer(flat):
            doc = m.group(1)
            titles = [m.group(2)]
            rest = flat[m.end():]
            while True:
                more = MORE_TITLES.match(rest)
                if not more:
                    break
                titles.append(more.group(1))
                rest = rest[more.end():]
            for title in titles:
                if not title_ok(doc, title):
                    problems.append(f'{rel}: cites {doc} "{title}", which has no such section')
        for m in DOC_PATH.finditer(flat):
            doc = m.group(1).rstrip(".")
            if not os.path.exists(os.path.join(root, doc)):
                problems.append(f"{rel}: names {doc}, which does not exist")
        if path.endswith(".md"):
            own = headings(text)
            problems += check_section_columns(rel, text, own)
            for m in BARE_SECTION.finditer(flat):
                t = m.group(1)
                if not names_heading(own, t) and not any(title_ok(d, t) for d in all_docs):
                    problems.append(f'{rel}: names section "{t}", which neither it nor any file under docs/ has')
            for m in REPO_PATH.finditer(text):
                target = m.group(1)
                bases = [root, os.path.dirname(path)] + [os.path.join(root, d) for d in INCLUDE_DIRS]
                if not any(os.path.exists(os.path.normpath(os.path.join(b, target))) for b in bases):
                    problems.append(f"{rel}: names {target}, which does not exist")
            for m in MD_LINK.finditer(text):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                target = target.split("#", 1)[0]
                if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
                    problems.append(f"{rel}: links {target}, which does not exist")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "providers", "p"))
        with open(os.path.join(root, "docs", "log.md"), "w") as f:
            f.write("# Log\n\n### Bulk copies for the weight ring (seventh session)\n\n### Method\n")
        with open(os.path.join(root, "docs", "index.md"), "w") as f:
            f.write("[log](log.md) [gone](gone.md) [web](https://example.com/x.md)\n\n## Kept\n\n"
                    "| what | section |\n|---|---|\n| a | Kept |\n| b | Lost |\n\nSee section \"Method\" and section \"Kept\";\n"
                    "section \"Nowhere\" is gone.\n")
        with open(os.path.join(root, "providers", "p", "README.md"), "w") as f:
            f.write("Layouts: `shared/formats/README.md` (gone); kernels in `providers/p/k.cuh`, `k.cuh` and\n"
                    "../p/k.cuh; the header kpr/nothing.h.\n")
        with open(os.path.join(root, "providers", "p", "k.cuh"), "w") as f:
            f.write('// measured (docs/log.md "Bulk copies for\n// the weight ring"), and docs/log.md, "Method".\n// `docs/log.md` (section "Method")\n// (see docs/log.md)")\n'
                    '// wrong: docs/log.md "Tensor copies", docs/gone.md "Anything"; see docs/missing.txt\n'
                    '// docs/log.md, "Method" and "No such"\n')
        got = sorted(check(root))
        want = sorted([
            'docs/index.md: links gone.md, which does not exist',
            'docs/index.md: its index names section "Lost", which it does not have',
            'docs/index.md: names section "Nowhere", which neither it nor any file under docs/ has',
            'providers/p/k.cuh: cites docs/log.md "Tensor copies", which has no such section',
            'providers/p/k.cuh: cites docs/gone.md "Anything", which has no such section',
            'providers/p/k.cuh: names docs/gone.md, which does not exist',
            'providers/p/k.cuh: names docs/missing.txt, which does not exist',
            'providers/p/k.cuh: cites docs/log.md "No such", which has no such section',
            'providers/p/README.md: names shared/formats/README.md, which does not exist',
            'providers/p/README.md: names kpr/nothing.h, which does not exist',
        ])
        if got != want:
            print("self-test failed\n  reported:\n    " + "\n    ".join(got) + "\n  expected:\n    " + "\n    ".join(want))
            return 1
        print(f"self-test passed: {len(want)} broken references found, the sound ones accepted")
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", help="repository root to check")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a generated tree")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.root:
        ap.error("--root or --self-test is required")
    if not os.path.isdir(os.path.join(args.root, "docs")):
        print(f"check_doc_references: {args.root} is not a repository root (it has no docs/ folder)")
        return 2
    problems = check(os.path.abspath(args.root))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken reference(s) under {args.root}")
        return 1
    print(f"all references under {args.root} resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
