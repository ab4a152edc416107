// Placeholder page (the page engineer replaces this file).
(function () {
  const token = new URLSearchParams(location.search).get("token") || "";
  fetch("/api/run", { headers: { "X-Cascade-Token": token } })
    .then((r) => r.json())
    .then((run) => {
      document.getElementById("status").textContent =
        "run " + (run.run_id || "(none)") + ": " + (run.status || "no run yet");
    })
    .catch((e) => {
      document.getElementById("status").textContent = "error: " + e;
    });
})();
