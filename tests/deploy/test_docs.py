"""The README tells how to build the image and apply each overlay that exists, and no
document names a deploy/ file that is gone."""

from __future__ import annotations

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
