"""Fetches a daemon's /metrics with a bearer token, parses it with the prometheus_client
OpenMetrics parser (which refuses malformed text), and prints every sample as JSON lines:
{"name": ..., "labels": {...}, "value": ...}. Usage: metrics_scrape.py URL TOKEN
"""

import json
import sys
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main():
    url, token = sys.argv[1], sys.argv[2]
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(request, timeout=10) as response:
        content_type = response.headers.get("Content-Type", "")
        text = response.read().decode("utf-8")
    if not content_type.startswith("application/openmetrics-text"):
        sys.exit("unexpected content type: %r" % content_type)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            print(json.dumps({"name": sample.name, "type": family.type,
                              "labels": sample.labels, "value": sample.value}))


if __name__ == "__main__":
    main()
