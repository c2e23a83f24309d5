"""`python -m controller.request > docs/request-schema.json`: print the request's JSON Schema."""

import json

from controller.request import request_json_schema

print(json.dumps(request_json_schema(), indent=2))
