"""Files written all or nothing from Python: attnkit._core.StagedOutputs and the head viewer's page and
picture (heads.draw), as root and as user nobody. Each output that cannot or must not be written,
named after one that can, is refused before anything is written, naming the flag and the path, and
the earlier target keeps every byte. (docs/guarantees.md)"""

from __future__ import annotations

import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import attnkit.heads as heads
from attnkit import _core

PREVIOUS = b"the earlier target's previous contents"


def refused_paths(tmp_path):
    """(path, what the message says) for outputs refused to anyone; the folder gets what they need."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "linked").write_bytes(b"two names")
    os.link(tmp_path / "linked", tmp_path / "hard")
    os.symlink("earlier", tmp_path / "link-to-earlier")
    return [
        (str(tmp_path / "sub"), "Is a directory"),
        ("", "the file name is empty"),
        (str(tmp_path / "new") + "/", "ending in '/'"),
        (str(tmp_path / "missing" / "x"), "No such file or directory"),
        (str(tmp_path / "hard"), "2 hard links"),
        (str(tmp_path / ("n" * 256)), "File name too long"),
        (str(tmp_path / "earlier"), "the same file as"),
        (str(tmp_path / "sub" / ".." / "earlier"), "the same file as"),
        (str(tmp_path / "link-to-earlier"), "the same file as"),
    ]


def weights():
    return heads.HeadWeights("m", ["a", "b"], [], np.full((1, 1, 2, 2), 0.5, dtype=np.float32))


def test_staged_outputs_all_or_nothing(tmp_path):
    earlier = tmp_path / "earlier"
    earlier.write_bytes(PREVIOUS)
    earlier.chmod(0o600)
    for bad, words in refused_paths(tmp_path):
        before = sorted(os.listdir(tmp_path))
        staged = _core.StagedOutputs()
        staged.add(str(earlier), "--first")
        with pytest.raises(ValueError, match="cannot open for writing|the same file") as error:
            staged.add(bad, "--second")
        assert f"--second {bad}: " in str(error.value) and words in str(error.value)
        del staged
        assert earlier.read_bytes() == PREVIOUS
        assert sorted(os.listdir(tmp_path)) == before, "a temporary file left"
    staged = _core.StagedOutputs()
    staged.add(str(earlier), "--first")
    staged.add(str(tmp_path / "second"), "--second")
    staged.write(str(earlier), lambda file: open(file, "wb").write(b"new"))
    staged.write(str(tmp_path / "second"), lambda file: open(file, "wb").write(b"second"))
    staged.commit()
    assert earlier.read_bytes() == b"new"
    assert earlier.stat().st_mode & 0o777 == 0o600, "a private file stays private"


@pytest.mark.skipif(not _core.has_drawing, reason="built without the drawing layer")
def test_head_viewer_writes_both_files_or_neither(tmp_path):
    page = tmp_path / "earlier"
    page.write_bytes(PREVIOUS)
    for bad, words in refused_paths(tmp_path):
        before = sorted(os.listdir(tmp_path))
        with pytest.raises(ValueError) as error:
            heads.draw(weights(), html=str(page), png=bad)
        assert f"--png {bad}: " in str(error.value) and words in str(error.value)
        assert page.read_bytes() == PREVIOUS
        assert sorted(os.listdir(tmp_path)) == before, "a file created or left"
    heads.draw(weights(), html=str(page), png=str(tmp_path / "h.png"))
    assert b"<html" in page.read_bytes() and (tmp_path / "h.png").read_bytes().startswith(b"\x89PNG")


NOBODY_SCRIPT = r"""
import os, sys
import numpy as np
import attnkit.heads as heads
folder, earlier = sys.argv[1], sys.argv[2]
w = heads.HeadWeights("m", ["a", "b"], [], np.full((1, 1, 2, 2), 0.5, dtype=np.float32))
for bad in ["locked/x", "readonly", "roots"]:
    try:
        heads.draw(w, html=earlier, png=os.path.join(folder, bad))
        print("written:", bad)
    except ValueError as error:
        print(error)
"""


@pytest.mark.skipif(not _core.has_drawing, reason="built without the drawing layer")
def test_head_viewer_as_an_unprivileged_user(request):
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("cannot drop privileges: not root, or no setpriv")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    reach = subprocess.run([setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c",
                            "import attnkit.heads"], capture_output=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
    if reach.returncode != 0:
        pytest.skip(f"user nobody cannot run {sys.executable} with attnkit (a folder on its path is private)")
    folder = pathlib.Path(tempfile.mkdtemp(prefix="attnkit_outputs_"))  # pytest's own folder is root's, 0700
    request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
    folder.chmod(0o777)
    earlier = folder / "earlier"
    earlier.write_bytes(PREVIOUS)
    os.chown(earlier, nobody.pw_uid, nobody.pw_gid)
    (folder / "locked").mkdir(mode=0o555)
    (folder / "readonly").write_bytes(b"read-only")
    os.chown(folder / "readonly", nobody.pw_uid, nobody.pw_gid)
    (folder / "readonly").chmod(0o444)
    (folder / "roots").write_bytes(b"root's")
    result = subprocess.run([setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c",
                             NOBODY_SCRIPT, str(folder), str(earlier)], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all("Permission denied" in line for line in lines), result.stdout
    assert earlier.read_bytes() == PREVIOUS
    assert (folder / "readonly").read_bytes() == b"read-only" and (folder / "roots").read_bytes() == b"root's"
