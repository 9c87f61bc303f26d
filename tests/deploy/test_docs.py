"""The README tells how to build the image and apply each overlay that exists, and no
document names a deploy/ file that is gone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ROOT / "deploy" / "kustomize" / "overlays"


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_builds_the_image_and_applies_every_overlay() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docker build -f deploy/Dockerfile -t kube-gateway:0.1.0 ." in readme
    overlays = sorted(p.name for p in OVERLAYS.iterdir() if p.is_dir())
    assert overlays == ["passthrough", "shared-watches"]
    for overlay in overlays:
        assert f"kubectl apply -k deploy/kustomize/overlays/{overlay}" in readme


def test_documents_name_only_deploy_files_that_exist() -> None:
    for doc in documents():
        text = doc.read_text(encoding="utf-8")
        for word in text.replace("`", " ").replace("(", " ").replace(")", " ").split():
            if word.startswith("deploy/"):
                path = word.rstrip(".,:;")
                assert (ROOT / path).exists(), f"{doc.name} names {path}"


def test_the_readme_python_example_runs_as_written(tmp_path: Path) -> None:
    """The README's "Using the core from Python" script, copied out and run by the project's
    interpreter: an example that breaks fails here."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    (script,) = [b for b in blocks if "asyncio.run(main())" in b]
    path = tmp_path / "core_example.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()[:2]
    assert "'tier': 'front'" in first  # the dry-run patch answered with the label
    assert second.startswith("ADDED ")
