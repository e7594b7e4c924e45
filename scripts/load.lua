-- wrk script: POST the AdmissionReview fixture named by EDGEGATE_REVIEW (default: a typical copy).
local path = os.getenv("EDGEGATE_REVIEW") or "tests/fixtures/copy-create.json"
local f = assert(io.open(path, "rb"))
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d duration_s=%.2f rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout))
end

-- Paced mode: EDGEGATE_RATE requests/s over EDGEGATE_CONNECTIONS connections, each connection
-- waiting connections/rate seconds between requests (wrk's delay hook).
local rate = tonumber(os.getenv("EDGEGATE_RATE") or "")
local conns = tonumber(os.getenv("EDGEGATE_CONNECTIONS") or "64")
if rate then
  delay = function()
    return conns * 1000 / rate
  end
end
