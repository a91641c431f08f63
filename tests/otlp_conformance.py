"""Conformance with OpenTelemetry's own protobuf bindings (the `opentelemetry-proto` package):
a collector built on them decodes every export of a real `idem serve` (the binary given as
argv[1]), configured only by the standard OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME.
A signal sent with a W3C traceparent is one trace: the request under the sender's span, the
claim under the request, each callback attempt under the claim, and each callback's own
traceparent naming its attempt. Prints `N passed, M failed` and exits non-zero on a failure."""

import http.server
import json
import re
import sys
import tempfile
import time

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from conformance_http import request, serve, start_idem, wait_for, write_config

TRACE, SENDER = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$")
results = {"passed": 0, "failed": 0}
spans, services, callbacks = [], set(), []


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")


class Collector(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        export = trace_service_pb2.ExportTraceServiceRequest()
        export.ParseFromString(body)
        for resource in export.resource_spans:
            for a in resource.resource.attributes:
                if a.key == "service.name":
                    services.add(a.value.string_value)
            for scope in resource.scope_spans:
                spans.extend(scope.spans)
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        callbacks.append((self.path, self.headers.get("traceparent", "")))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    collector, otlp = serve(Collector)
    receiver, recv = serve(Receiver)
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(tmp, f"""
[idempotency]
key_secret = "conformance-key-secret-0123456789"
[tenants.acme]
api_key = "sk_acme_test_key"
callback_secret = "whsec_c2VjcmV0LWZvci1hY21lLWNhbGxiYWNrcw=="
[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "{recv}/lock" }}, {{ name = "open_case", url = "{recv}/case" }} ]
""")
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp, "OTEL_SERVICE_NAME": "idem-conformance"}
        idem, base = start_idem(sys.argv[1], config, env)
        try:
            body = json.dumps({"type": "sim_swap", "subject": "+447700900123"}).encode()
            headers = {"Authorization": "Bearer sk_acme_test_key",
                       "Content-Type": "application/json",
                       "Idempotency-Key": f"evt_{time.time_ns()}",
                       "traceparent": f"00-{TRACE}-{SENDER}-01"}
            status, h, _ = request(base + "/v1/signals", body, headers, "POST")
            check("the signal is decided", status == 201, str(status))
            named = TRACEPARENT.match(h.get("traceresponse", ""))
            check("traceresponse names the sender's trace", bool(named) and named[1] == TRACE,
                  h.get("traceresponse", ""))
            wait_for(callbacks, 2)
            deadline = time.time() + 10
            while time.time() < deadline and not any(s.name == "POST /v1/signals" for s in spans):
                time.sleep(0.05)
        finally:
            idem.terminate()
            idem.wait(timeout=10)
    collector.shutdown()
    receiver.shutdown()

    check("the service is named by OTEL_SERVICE_NAME", services == {"idem-conformance"},
          str(services))
    ours = [s for s in spans if s.trace_id.hex() == TRACE]
    check("every span is of the sender's trace", len(ours) == len(spans) and ours,
          f"{len(ours)} of {len(spans)}")
    by_name = {}
    for s in ours:
        by_name.setdefault(s.name, []).append(s)
    request_span = by_name.get("POST /v1/signals", [None])[0]
    claim = by_name.get("claim", [None])[0]
    check("the request's parent is the sender's span", request_span is not None
          and request_span.parent_span_id.hex() == SENDER
          and request_span.kind == request_span.SPAN_KIND_SERVER)
    check("the claim is the request's child", claim is not None and request_span is not None
          and claim.parent_span_id == request_span.span_id)
    attempts = {s.span_id.hex(): s for s in by_name.get("attempt", [])}
    check("an attempt per callback, each the claim's child", len(attempts) == 2 and claim is not None
          and all(a.parent_span_id == claim.span_id and a.kind == a.SPAN_KIND_CLIENT
                  for a in attempts.values()))
    for path, traceparent in callbacks:
        m = TRACEPARENT.match(traceparent)
        check(f"callback {path} names its attempt in traceparent",
              bool(m) and m[1] == TRACE and m[2] in attempts, traceparent)
    leaked = [s.name for s in spans for a in s.attributes if "+447700900123" in str(a.value)]
    check("no span holds the subject", not leaked, str(leaked))
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
