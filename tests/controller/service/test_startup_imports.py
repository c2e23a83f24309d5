"""The controller is ready before the Vertex AI library is imported: that import takes seconds
(every service of the API), and Cloud Run waits for `/readyz` on every start and deploy. The
library is imported by the first use of a Vertex type or call, and is then the real one."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import controller.service.daemon
from controller.adapters.vertex import VertexBackend
from controller.settings import Settings
VertexBackend(Settings(project="p", region="us-central1", vertex_endpoint="127.0.0.1:1"))
before = "google.cloud.aiplatform_v1" in sys.modules
from controller.request.aiplatform import aiplatform_v1
spec = aiplatform_v1.CustomJobSpec  # the first use imports it
from google.cloud import aiplatform_v1 as real
print(json.dumps({"before": before, "same": spec is real.CustomJobSpec}))
"""


def test_building_the_controller_imports_no_vertex_library_until_first_use():
    env = {"PATH": "/usr/bin:/bin", "RELAUNCH_STATE_STORE": "sqlite:///:memory:"}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"before": False, "same": True}
