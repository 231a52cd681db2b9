// Two small enhancements; every page works without them.
// 1. Pin a matrix cell's tooltip (its "pin" button); Escape or a click elsewhere unpins.
// 2. Refresh the live part of the page (#live[data-refresh]) every N seconds, unless a tooltip is pinned.
(function () {
  "use strict";
  function unpinAll(except) {
    document.querySelectorAll(".tip.pinned").forEach(function (tip) { if (tip !== except) tip.classList.remove("pinned"); });
  }
  document.addEventListener("click", function (event) {
    var pin = event.target.closest(".tip .pin");
    if (pin) {
      var tip = pin.closest(".tip");
      unpinAll(tip);
      tip.classList.toggle("pinned");
      event.preventDefault();
      return;
    }
    if (!event.target.closest(".tip")) unpinAll(null);
  });
  document.addEventListener("keydown", function (event) { if (event.key === "Escape") unpinAll(null); });

  var live = document.getElementById("live");
  var seconds = live && parseInt(live.dataset.refresh, 10);
  if (!seconds) return;
  window.setInterval(function () {
    if (document.hidden || document.querySelector(".tip.pinned")) return;
    fetch(window.location.href, { headers: { "X-Requested-With": "fetch" } })
      .then(function (response) { if (!response.ok) throw new Error(response.status); return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (fresh) live.innerHTML = fresh.innerHTML;
      })
      .catch(function () { /* keep the current data; the next tick tries again */ });
  }, seconds * 1000);
})();
