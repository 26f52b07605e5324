// Loads the WASM app. Kept outside index.html so that a strict
// Content-Security-Policy (no inline scripts) works.
//
// The theme is applied before the app starts so that dark mode does not
// flash: `?theme=dark|light|auto` wins, else the choice saved by the toggle.
//
// The file names below are rewritten to content-hashed ones when the bundle
// is packed (web/pack): the master lets browsers keep those for a year.
const params = new URLSearchParams(location.search);
let theme = params.get('theme');
try {
  if (theme) localStorage.setItem('tunefleet.theme', theme);
  else theme = localStorage.getItem('tunefleet.theme');
} catch (_) { /* storage may be disabled */ }
if (theme === 'dark' || theme === 'light') document.documentElement.dataset.theme = theme;

// The file checks (workload YAML, Lorien files, ONNX models) and the
// downloads are a second module, fetched the first time the upload box or a
// download is used: most visits only watch the fleet. A failed load is
// retried on the next use.
let checker;
function loadChecker() {
  checker ??= import('/check.js')
    .then(async (m) => {
      await m.default({ module_or_path: '/check_bg.wasm' });
      return m;
    })
    .catch((e) => {
      checker = undefined;
      throw e;
    });
  return checker;
}
globalThis.tunefleetCheckWorkloads = async (text, filename) =>
  (await loadChecker()).check_workloads(text, filename);
globalThis.tunefleetMakeDownloads = async (download, resultsReply) =>
  (await loadChecker()).make_downloads(download, resultsReply);
globalThis.tunefleetLoadModel = (file, bytes) => {
  // `bytes` is a view into the page's memory, which may move once this
  // returns: copy it now.
  const copy = bytes.slice();
  return loadChecker().then((m) => m.load_model(file, copy));
};

import init from '/web.js';
init({ module_or_path: '/web_bg.wasm' }).catch((e) => {
  const boot = document.getElementById('boot');
  if (boot) boot.textContent = 'The dashboard failed to load: ' + e;
  console.error(e);
});
