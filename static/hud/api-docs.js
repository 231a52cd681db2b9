// Swagger UI for /api/schema/, from the pinned drf-spectacular-sidecar files (no CDN, no inline script).
(function () {
  "use strict";
  var box = document.getElementById("swagger-ui");
  if (!box || !window.SwaggerUIBundle) return;
  window.SwaggerUIBundle({ url: box.dataset.schema, dom_id: "#swagger-ui", deepLinking: true, tryItOutEnabled: false });
})();
