// Herald's operator page works without this script; it only adds the
// "select every event shown" box of the dead-letter list.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var all = document.getElementById("select-all");
  if (!all) {
    return;
  }
  var picks = document.querySelectorAll("input.pick");
  all.addEventListener("change", function () {
    picks.forEach(function (p) { p.checked = all.checked; });
  });
  picks.forEach(function (p) {
    p.addEventListener("change", function () {
      var n = 0;
      picks.forEach(function (q) { if (q.checked) { n++; } });
      all.checked = n === picks.length;
      all.indeterminate = n > 0 && n < picks.length;
    });
  });
});
