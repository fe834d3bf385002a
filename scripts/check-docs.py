#!/usr/bin/env python3
"""Checks that README.md and docs/*.md cannot rot: their examples build and run, the output they
show is the output the programs print, and every link, file and flag they name exists.

Code blocks, by their info string (docs/testing.md, "Documentation checks", says the same):
  cpp      a C++20 program (with `int main`: built against the installed attnkit and run) or a
           translation unit (compiled only)
  c        the same in C11 against attnkit.h (libattnkit_c)
  python   run by the Python given with --python (attnkit and numpy installed); a block importing
           torch or transformers is skipped, saying so, only when that package is missing and
           ATTNKIT_TEST_TORCH / ATTNKIT_TEST_TRANSFORMERS is unset
  sh       run by `bash -euo pipefail` in an empty directory, the build's bin/ first on PATH and
           ATTNKIT_REPO naming the repository
  console  `$ command` lines run like sh in one directory; the lines after each are its expected
           output, compared exactly (a line `...` matches any number of lines)
  X fragment   shown, not run: python and sh are parsed for syntax only
Other info strings (text, json, ...) are not checked.

Beside the blocks: every relative link and image exists (and its #anchor is a heading there);
every backticked repository path exists; every `--flag` written after `attnkit <command>` is one
that command's --help lists; and every flag of every command, every enumerator and function of the
C header and every C++ error code is named in the manual page about it, so that a new one cannot
go undocumented.

Usage: check-docs.py [--build DIR] [--python PY] [--keep] [--self-test] [PAGE ...]
(with pages named, only they are checked, and the coverage checks are skipped)"""
import argparse
import functools
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_TIMEOUT = 120  # seconds a block may run; each is meant to take a few

failures = []
counts = {"built and run": 0, "compiled": 0, "run": 0, "outputs compared": 0, "fragments": 0,
          "links": 0, "paths": 0, "flags": 0}
skipped = []  # "page:line: why" of each python block not run


def fail(where, message):
    failures.append(f"{where}: {message}")


# ---- reading the pages ----

class Block:
    def __init__(self, page, line, lang, words, text):
        self.page, self.line, self.lang, self.words, self.text = page, line, lang, words, text

    @property
    def where(self):
        return f"{os.path.relpath(self.page, REPO)}:{self.line}"


def pages():
    if args.pages:
        return [os.path.abspath(p) for p in args.pages]
    found = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    return [p for p in found if os.path.isfile(p)]


FENCE = re.compile(r"^( {0,3})(```+|~~~+)\s*([^`]*)$")


@functools.lru_cache(maxsize=None)
def split_page(path):
    """Returns the page's code blocks and its prose lines (with line numbers), fences removed.
    Each page is read once, also when links to it are checked."""
    blocks, prose = [], []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).split()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].lstrip().startswith(fence):
            line = lines[i]
            body.append(line[indent:] if line[:indent].strip() == "" else line)
            i += 1
        if i == len(lines):
            fail(f"{os.path.relpath(path, REPO)}:{start}", "code block is never closed")
        i += 1
        lang = info[0].lower() if info else ""
        blocks.append(Block(path, start, lang, set(w.lower() for w in info[1:]), "\n".join(body) + "\n"))
    return blocks, prose


# ---- running the blocks ----

def run(cmd, where, cwd, env=None, input_text=None):
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, input=input_text, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        fail(where, f"took more than {RUN_TIMEOUT} s: {' '.join(cmd)[:120]}")
        return None


@functools.lru_cache(maxsize=None)
def shell_env():
    """The environment every example runs in (a copy per call is not needed: none changes it)."""
    env = dict(os.environ)
    env["PATH"] = os.path.join(args.build, "bin") + os.pathsep + env.get("PATH", "")
    env["ATTNKIT_REPO"] = REPO
    return env


def report_run(block, result, what):
    if result is not None and result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-15:]
        fail(block.where, f"{what} exited with {result.returncode}:\n    " + "\n    ".join(tail))
        return False
    return result is not None


def build_compiled_blocks(blocks, work):
    """Builds every cpp and c block in one CMake project against an installed attnkit."""
    if not blocks:
        return
    prefix = os.path.join(work, "prefix")
    r = run(["cmake", "--install", args.build, "--prefix", prefix], "cmake --install", REPO)
    if not r or r.returncode != 0:
        fail("cmake --install", (r.stdout + r.stderr)[-2000:] if r else "timed out")
        return
    project = os.path.join(work, "blocks")
    os.makedirs(project)
    cmake = ["cmake_minimum_required(VERSION 3.25)", "project(doc_blocks LANGUAGES C CXX)",
             "set(CMAKE_CXX_STANDARD 20)", "set(CMAKE_CXX_STANDARD_REQUIRED ON)",
             "set(CMAKE_C_STANDARD 11)", "set(CMAKE_C_STANDARD_REQUIRED ON)",
             "set(CMAKE_C_EXTENSIONS OFF)", "find_package(attnkit REQUIRED)",
             # GCC 12 warns (-Wmissing-field-initializers) about designated initializers that leave
             # members at their defaults, as `AttentionOptions{.causal = ...}` is meant to.
             "add_compile_options(-Wall -Wextra -Werror -Wno-missing-field-initializers)"]
    for n, block in enumerate(blocks):
        source = f"block{n}.{'cpp' if block.lang == 'cpp' else 'c'}"
        with open(os.path.join(project, source), "w", encoding="utf-8") as f:
            f.write(block.text)
        block.target = f"block{n}"
        block.has_main = re.search(r"\bint\s+main\s*\(", block.text) is not None
        kind = "add_executable({0} {1})" if block.has_main else "add_library({0} OBJECT {1})"
        library = "attnkit::attnkit" if block.lang == "cpp" else "attnkit::attnkit_c m"
        cmake += [kind.format(block.target, source),
                  f"target_link_libraries({block.target} PRIVATE {library})"]
    with open(os.path.join(project, "CMakeLists.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(cmake) + "\n")
    out = os.path.join(work, "blocks-build")
    r = run(["cmake", "-S", project, "-B", out, "-DCMAKE_BUILD_TYPE=Release",
             f"-DCMAKE_PREFIX_PATH={prefix}"], "cmake configure of the examples", work)
    if not r or r.returncode != 0:
        fail("cmake configure of the examples", (r.stdout + r.stderr)[-3000:] if r else "timed out")
        return
    for block in blocks:  # one target at a time, so that an error names its block
        r = run(["cmake", "--build", out, "--target", block.target, "-j", str(os.cpu_count() or 2)],
                block.where, work)
        if not report_run(block, r, f"building the {block.lang} example"):
            continue
        if not block.has_main:
            counts["compiled"] += 1
            continue
        cwd = tempfile.mkdtemp(dir=work)
        r = run([os.path.join(out, block.target)], block.where, cwd, shell_env())
        if report_run(block, r, f"the {block.lang} example"):
            counts["built and run"] += 1


@functools.lru_cache(maxsize=None)
def importable(package):
    """Whether the examples' Python imports `package` (asked once: importing torch takes seconds)."""
    return subprocess.run([args.python, "-c", f"import {package}"], capture_output=True).returncode == 0


def optional_packages_missing(block):
    """Names a package the block imports that is missing and that this run may go without."""
    for package, variable in (("torch", "ATTNKIT_TEST_TORCH"), ("transformers", "ATTNKIT_TEST_TRANSFORMERS")):
        if re.search(rf"^\s*(import|from)\s+{package}\b", block.text, re.M) or \
           (package == "transformers" and "attnkit.integrations.transformers" in block.text):
            if not importable(package) and os.environ.get(variable) != "1":
                return f"{package} is not installed (set {variable}=1 to require it)"
    return None


def run_python(block, work):
    if "fragment" in block.words:
        try:
            compile(block.text, block.where, "exec")
        except SyntaxError as e:
            fail(block.where, f"python fragment does not parse: {e}")
        counts["fragments"] += 1
        return
    reason = optional_packages_missing(block)
    if reason:
        skipped.append(f"{block.where}: {reason}")
        return
    cwd = tempfile.mkdtemp(dir=work)
    r = run([args.python, "-"], block.where, cwd, shell_env(), block.text)
    if report_run(block, r, "the python example"):
        counts["run"] += 1


def run_sh(block, work):
    if "fragment" in block.words:
        r = run(["bash", "-n"], block.where, work, input_text=block.text)
        if r and r.returncode != 0:
            fail(block.where, f"shell fragment does not parse: {r.stderr.strip()}")
        counts["fragments"] += 1
        return
    cwd = tempfile.mkdtemp(dir=work)
    r = run(["bash", "-euo", "pipefail"], block.where, cwd, shell_env(), block.text)
    if report_run(block, r, "the shell example"):
        counts["run"] += 1


def output_matches(expected, actual):
    """Exact comparison of lines, where an expected line `...` matches any number of lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(output_matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and output_matches(expected[1:], actual[1:])


def run_console(block, work):
    if "fragment" in block.words:
        counts["fragments"] += 1
        return
    steps, current = [], None
    for line in block.text.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            current = [line[2:], []]
            steps.append(current)
        elif current is None:
            fail(block.where, "a console block starts with a line that is not a `$ ` command")
            return
        else:
            current[1].append(line)
    cwd = tempfile.mkdtemp(dir=work)
    for command, expected in steps:
        r = run(["bash", "-o", "pipefail", "-c", command], block.where, cwd, shell_env())
        if r is None:
            return
        actual = (r.stdout + r.stderr).rstrip("\n").split("\n") if (r.stdout + r.stderr) else []
        while expected and expected[-1] == "":
            expected = expected[:-1]
        if r.returncode != 0:
            fail(block.where, f"`{command}` exited with {r.returncode}: {r.stderr.strip()[:500]}")
        elif not output_matches(expected, [a.rstrip() for a in actual]):
            diff = next((i for i, (e, a) in enumerate(zip(expected, actual)) if e != "..." and e != a.rstrip()),
                        min(len(expected), len(actual)))
            shown = lambda lines: lines[diff] if diff < len(lines) else "(end of output)"
            fail(block.where, f"`{command}` printed something else than the page shows; first "
                              f"difference at output line {diff + 1}:\n    page:    {shown(expected)}\n"
                              f"    printed: {shown(actual)}")
        else:
            counts["outputs compared"] += 1


# ---- links, paths and flags ----

def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    _, prose = split_page(path)
    for _, line in prose:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<img[^>]+src=\"([^\"]+)\"")
PATH_ROOTS = ("src/", "include/", "tools/", "tests/", "scripts/", "docs/", "examples/", "python/",
              "fuzz/", "cmake/", ".ci/")
TOP_FILES = {"README.md", "CHANGELOG.md", "LICENSE", "CMakeLists.txt", "pyproject.toml"}


def check_links(path, prose):
    for number, line in prose:
        where = f"{os.path.relpath(path, REPO)}:{number}"
        for m in LINK.finditer(line):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # a URL, not a file of the repository
            counts["links"] += 1
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(resolved):
                fail(where, f"link to {target}: {os.path.relpath(resolved, REPO)} does not exist")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                fail(where, f"link to {target}: no heading with anchor #{anchor} in {os.path.relpath(resolved, REPO)}")


def inline_code(line):
    return re.findall(r"(?<!`)`([^`]+)`(?!`)", line)


def check_paths(path, prose):
    for number, line in prose:
        for span in inline_code(line):
            token = span.strip()
            if " " in token or not (token.startswith(PATH_ROOTS) or token in TOP_FILES):
                continue
            token = re.sub(r":\d+(-\d+)?$", "", token)  # file.cpp:120
            pattern = re.sub(r"<[^<>/]+>", "*", token)  # fuzz/corpus/<target>/
            counts["paths"] += 1
            if not glob.glob(os.path.join(REPO, pattern)):
                fail(f"{os.path.relpath(path, REPO)}:{number}", f"`{token}` does not exist in the repository")


class Help:
    """The flags each attnkit command's --help lists."""

    def __init__(self):
        self.flags = {}
        self.subcommands = {}
        binary = os.path.join(args.build, "bin", "attnkit")
        top = self.read("attnkit", [binary])
        self.commands = re.findall(r"^  ([a-z]+)\s{2,}", top.split("Commands:")[1].split("\n\n")[0], re.M)
        for command in self.commands:
            text = self.read(f"attnkit {command}", [binary, command])
            # A command with its own commands (`attnkit lab scaling`) lists them before "Run '...".
            if re.search(rf"^Run 'attnkit {command} <", text, re.M):
                self.subcommands[command] = re.findall(r"^  ([a-z]+)\s{2,}\S", text.split("\nRun '")[0], re.M)
                for sub in self.subcommands[command]:
                    self.read(f"attnkit {command} {sub}", [binary, command, sub])
        mpi = os.path.join(args.build, "bin", "attnkit-mpi")
        if os.path.exists(mpi):
            self.read("attnkit-mpi", [mpi])
        for module in ("attnkit.heads", "attnkit.bench"):
            self.read(f"python -m {module}", [args.python, "-m", module])

    def read(self, key, command):
        """Runs `command --help`, records the flags it lists under `key`, and returns its text."""
        r = subprocess.run(command + ["--help"], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{key} --help", f"exited with {r.returncode}: {r.stderr.strip()[-300:]}")
        self.flags[key] = set(re.findall(r"--[a-z0-9][a-z0-9-]*", r.stdout))
        return r.stdout

    def check(self, command_line, where):
        """Checks the flags of one command line that runs attnkit."""
        m = re.search(r"(?:^|[\s/;&|(])(attnkit-mpi|attnkit|python3? -m attnkit\.(?:heads|bench))(?=\s|$)(.*)", command_line)
        if not m:
            return
        program, rest = m.group(1), m.group(2)
        key = program.replace("python3 ", "python ")
        if program == "attnkit":
            words = rest.split()
            if words and words[0] in self.commands:
                key = f"attnkit {words[0]}"
                if len(words) > 1 and words[1] in self.subcommands.get(words[0], ()):
                    key = f"attnkit {words[0]} {words[1]}"
            elif words and re.match(r"^[a-z][a-z-]*$", words[0]):
                fail(where, f"`attnkit {words[0]}` is not an attnkit command")
                return
        if key not in self.flags:
            return
        rest = re.split(r"\s(?:[|;]|&&|\|\|)\s", rest)[0]
        for flag in re.findall(r"(?:^|\s)(--[a-z0-9][a-z0-9-]*)", rest):
            counts["flags"] += 1
            if flag not in self.flags[key] and flag not in ("--help", "--version"):
                fail(where, f"`{key}` has no flag {flag} (not in `{key} --help`)")


def check_flags(help_, path, prose, blocks):
    for number, line in prose:
        for span in inline_code(line):
            help_.check(span, f"{os.path.relpath(path, REPO)}:{number}")
    for block in blocks:
        if block.lang in ("sh", "bash", "console"):
            for offset, line in enumerate(block.text.split("\n")):
                if block.lang == "console" and not line.startswith("$ "):
                    continue
                line = re.sub(r"(^|\s)#.*$", "", line)  # a shell comment is prose
                help_.check(line, f"{os.path.relpath(path, REPO)}:{block.line + 1 + offset}")


def check_coverage(help_):
    """Every flag, C name and error code is named on the page that documents its command or API."""
    def page_text(name):
        path = os.path.join(REPO, "docs", name)
        return open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    for key, flags in help_.flags.items():
        page = "python.md" if key.startswith("python") else "distributed.md" if key == "attnkit-mpi" else "cli.md"
        text = page_text(page)
        for flag in sorted(flags - {"--help", "--version"}):
            if not re.search(re.escape(flag) + r"(?![a-z0-9-])", text):
                fail(f"docs/{page}", f"`{key} --help` lists {flag}, which the page does not document")
    # The C API: every enumerator (status codes, dtypes, causal modes, kernels, layouts) and every
    # function of attnkit.h is named in c-api.md.
    header = open(os.path.join(REPO, "include", "attnkit", "attnkit.h"), encoding="utf-8").read()
    c_api = page_text("c-api.md")
    names = set(re.findall(r"^\s+(ATTNKIT_[A-Z0-9_]+)\s*=", header, re.M))
    names |= set(re.findall(r"ATTNKIT_C_API\s+[\w\s*]*?\b(attnkit_\w+)\s*\(", header))
    for name in sorted(names):
        if not re.search(rf"\b{name}\b", c_api):
            fail("docs/c-api.md", f"{name} (include/attnkit/attnkit.h) is not documented")
    counts["C names"] = len(names)
    # The C++ error codes, named in cpp-api.md.
    error = open(os.path.join(REPO, "include", "attnkit", "error.hpp"), encoding="utf-8").read()
    enum = error[error.index("enum class ErrorCode"):]
    codes = re.findall(r"^\s+([a-z_]+)\b", enum[enum.index("{") + 1:enum.index("};")], re.M)
    cpp_api = page_text("cpp-api.md")
    for code in codes:
        if not re.search(rf"\b{code}\b", cpp_api):
            fail("docs/cpp-api.md", f"ErrorCode::{code} (include/attnkit/error.hpp) is not documented")
    if len(codes) < 5 or len(names) < 20:
        fail("check-docs", f"read only {len(codes)} error codes and {len(names)} C names: the headers' form changed?")


SELF_TEST_GOOD = """# A page that passes

[this page](good.md#a-page-that-passes), `scripts/check-docs.py`, `attnkit run --q q.npy --causal top-left`

```console
$ printf 'one\\ntwo\\nthree\\n'
one
...
three
```

```sh
attnkit info > /dev/null
```

```python
print("python runs")
```

```cpp
int main() { return 0; }
```

```c
int main(void) { return 0; }
```

```sh fragment
this is shown, not run
```
"""

# Each broken thing, and the words its failure must contain.
SELF_TEST_BAD = [
    ("```sh\nexit 3\n```", "exited with 3"),
    ("```python\nraise SystemExit(4)\n```", "exited with 4"),
    ("```cpp\nint main() { return 5; }\n```", "exited with 5"),
    ("```cpp\nint main() { return undeclared; }\n```", "building the cpp example"),
    ("```c\nint main(void) { return 6; }\n```", "exited with 6"),
    ("```console\n$ echo printed\nshown\n```", "printed something else"),
    ("```sh fragment\nif then fi\n```", "does not parse"),
    ("[a link](no-such-page.md)", "does not exist"),
    ("[an anchor](good.md#no-such-heading)", "no heading with anchor"),
    ("`src/no/such/file.cpp`", "does not exist in the repository"),
    ("`attnkit run --no-such-flag`", "has no flag --no-such-flag"),
    ("`attnkit no-such-command`", "is not an attnkit command"),
]


def self_test():
    """Shows that the checks can fail: a good page passes, and each broken one fails as it should."""
    work = tempfile.mkdtemp(prefix="attnkit-docs-self-test-")
    good = os.path.join(work, "good.md")
    with open(good, "w", encoding="utf-8") as f:
        f.write(SELF_TEST_GOOD)
    command = [sys.executable, os.path.abspath(__file__), "--build", args.build, "--python", args.python]
    r = subprocess.run(command + [good], capture_output=True, text=True)
    problems = [] if r.returncode == 0 else [f"a correct page failed:\n{r.stdout}{r.stderr}"]
    bad_pages = []
    for n, (text, _) in enumerate(SELF_TEST_BAD):
        page = os.path.join(work, f"bad{n}.md")
        with open(page, "w", encoding="utf-8") as f:
            f.write(f"# Broken {n}\n\n{text}\n")
        bad_pages.append(page)
    r = subprocess.run(command + bad_pages, capture_output=True, text=True)
    for n, (text, expected) in enumerate(SELF_TEST_BAD):
        lines = [line for line in r.stderr.split("check-docs: FAILED ")
                 if os.path.basename(line.split(":")[0]) == f"bad{n}.md"]
        if not any(expected in line for line in lines):
            problems.append(f"a page with {text!r} did not fail with '{expected}'")
    if r.returncode == 0:
        problems.append("the broken pages passed")
    shutil.rmtree(work, ignore_errors=True)
    for problem in problems:
        print(f"check-docs --self-test: FAILED {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"check-docs --self-test: a correct page passes and {len(SELF_TEST_BAD)} broken ones fail as they should")


def main():
    global args
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"), help="a configured and built build tree")
    parser.add_argument("--python", default=os.path.join(REPO, "build-python", "venv", "bin", "python"),
                        help="a Python with attnkit installed")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--self-test", action="store_true", help="show that broken pages fail")
    parser.add_argument("pages", nargs="*", help="check only these pages")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    # A path is made absolute (the examples run elsewhere); a bare name is looked up on PATH.
    args.python = os.path.abspath(args.python) if os.sep in args.python else shutil.which(args.python) or args.python
    if not os.path.exists(os.path.join(args.build, "bin", "attnkit")):
        sys.exit(f"check-docs: {args.build}/bin/attnkit does not exist: build first")
    if not os.path.exists(args.python):
        sys.exit(f"check-docs: {args.python} does not exist: run scripts/check-python.sh first")

    if args.self_test:
        self_test()
        return
    work = tempfile.mkdtemp(prefix="attnkit-docs-")
    help_ = Help()
    compiled = []
    for path in pages():
        blocks, prose = split_page(path)
        check_links(path, prose)
        check_paths(path, prose)
        check_flags(help_, path, prose, blocks)
        for block in blocks:
            if block.lang in ("cpp", "c++", "c"):
                block.lang = "c" if block.lang == "c" else "cpp"
                if "fragment" in block.words:
                    counts["fragments"] += 1
                else:
                    compiled.append(block)
            elif block.lang in ("python", "py"):
                run_python(block, work)
            elif block.lang in ("sh", "bash", "shell"):
                run_sh(block, work)
            elif block.lang == "console":
                run_console(block, work)
    build_compiled_blocks(compiled, work)
    if not args.pages:
        check_coverage(help_)

    if args.keep:
        print(f"check-docs: work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    for line in skipped:
        print(f"check-docs: skipped {line}")
    print("check-docs: " + ", ".join(f"{n} {what}" for what, n in counts.items()) +
          f", {len(skipped)} skipped over {len(pages())} pages")
    if failures:
        for line in failures:
            print(f"check-docs: FAILED {line}", file=sys.stderr)
        print(f"check-docs: {len(failures)} problem(s)", file=sys.stderr)
        sys.exit(1)
    print("check-docs: every example, link, path and flag checked out")


if __name__ == "__main__":
    main()
