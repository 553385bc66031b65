// Draws the demo's app icons (public/icon-192.png, icon-512.png and the
// maskable icon-maskable-512.png) from public/icon.svg in headless Chromium.
// The PNGs are committed; run this again only when the icon changes:
//   node demo/icons.mjs
import { chromium } from 'playwright-core';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pub = join(dirname(fileURLToPath(import.meta.url)), 'public');
const svg = readFileSync(join(pub, 'icon.svg'), 'utf8');
// A maskable icon is cropped to a circle of 80% by some launchers: the mark
// sits in the middle 60%, on a background that fills the whole square.
const glyph = svg.replace(/^<svg[^>]*>/, '').replace(/<\/svg>$/, '').replace(/<rect width="64" height="64"[^>]*\/>/, '');
const maskable = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64"><rect width="64" height="64" fill="#2f6f6a"/><g transform="translate(12.8 12.8) scale(0.6)">${glyph}</g></svg>`;

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium', args: ['--no-sandbox'] });
try {
  for (const [name, source, size] of [['icon-192.png', svg, 192], ['icon-512.png', svg, 512], ['icon-maskable-512.png', maskable, 512]]) {
    const page = await browser.newPage({ viewport: { width: size, height: size } });
    await page.setContent(`<style>html,body{margin:0;background:transparent}svg{display:block;width:${size}px;height:${size}px}</style>${source}`);
    writeFileSync(join(pub, name), await page.screenshot({ omitBackground: true }));
    await page.close();
    console.log(name);
  }
} finally {
  await browser.close();
}
