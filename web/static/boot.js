// Loads the Yew/WASM app. Kept outside index.html so that a strict
// Content-Security-Policy (no inline scripts) works.
//
// The theme is applied before the app starts so that dark mode does not
// flash: `?theme=dark|light|auto` wins, else the choice saved by the toggle.
const params = new URLSearchParams(location.search);
let theme = params.get('theme');
try {
  if (theme) localStorage.setItem('tunefleet.theme', theme);
  else theme = localStorage.getItem('tunefleet.theme');
} catch (_) { /* storage may be disabled */ }
if (theme === 'dark' || theme === 'light') document.documentElement.dataset.theme = theme;

import init from '/web.js';
init({ module_or_path: '/web_bg.wasm' }).catch((e) => {
  const boot = document.getElementById('boot');
  if (boot) boot.textContent = 'The dashboard failed to load: ' + e;
  console.error(e);
});
