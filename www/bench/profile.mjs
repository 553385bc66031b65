// A CPU profile of a page's thread over CDP, summed by function (self time):
// what the trace benches print.

/** Starts sampling every 50 µs. */
export async function startProfile(cdp) {
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 50 });
  await cdp.send('Profiler.start');
}

/** Stops sampling and prints the `n` functions with the most self time, in ms. */
export async function printProfile(cdp, n = 40) {
  const { profile } = await cdp.send('Profiler.stop');
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map();
  profile.samples.forEach((id, i) => {
    const f = byId.get(id).callFrame;
    const k = `${f.functionName || '(anon)'} ${f.url.split('/').pop()}:${f.lineNumber}`;
    self.set(k, (self.get(k) || 0) + (profile.timeDeltas[i] || 0));
  });
  const busy = [...self].filter(([k]) => !k.startsWith('(idle)')).reduce((a, [, us]) => a + us, 0);
  console.log((busy / 1000).toFixed(1).padStart(8), 'ms busy (every function but idle)');
  for (const [k, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, n)) console.log((us / 1000).toFixed(1).padStart(8), 'ms', k);
}
