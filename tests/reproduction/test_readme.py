"""The README's quick-start code runs as written."""
import re
from pathlib import Path


def test_readme_quickstart_runs():
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python block"
    namespace = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["means"].shape == (3, 5)
