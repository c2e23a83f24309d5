"""The job request format (v1): loading, validation, the canonical form, and its CustomJob.

A request arrives as JSON (Pub/Sub) or YAML/JSON text (CLI files). The modules follow the path a
request takes:

- `loading`: bytes or text to a plain document, safely (size, nesting, YAML tags, duplicate keys);
- `fields`: the Relaunch part (jobId, checkpoint, restartPolicy, labels), pydantic models;
- `jobspec`: the `jobSpec` part, a Vertex CustomJobSpec in REST form walked with the Vertex
  library's own descriptors, so every Vertex field is accepted and a typo is rejected;
- `parsed`: `JobRequest`, `CancelRequest` and `parse_request`, the one entry point;
- `render`: a parsed request to the CustomJob of one attempt; `labels`: Vertex label rules.

Every problem is collected and reported with its field path (`problems`); nothing here lets a
traceback reach the user.
"""

from controller.request.fields import request_json_schema
from controller.request.limits import MAX_REQUEST_BYTES, RELAUNCH_ENV_NAMES
from controller.request.parsed import CancelRequest, JobRequest, parse_request
from controller.request.problems import Problem, RequestInvalid

__all__ = [
    "MAX_REQUEST_BYTES",
    "RELAUNCH_ENV_NAMES",
    "CancelRequest",
    "JobRequest",
    "Problem",
    "RequestInvalid",
    "parse_request",
    "request_json_schema",
]
