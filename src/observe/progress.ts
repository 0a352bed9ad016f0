/** Progress on long CLI work: a bar on an interactive terminal, nothing otherwise (logs and CI stay clean). */
import cliProgress from 'cli-progress';

interface Progress {
  update(value: number): void;
  stop(): void;
}

/** A bar over `total` (bytes or items); `total` 0 shows a running count instead. */
export function progressReporter(label: string, total: number): Progress {
  if (!process.stderr.isTTY) return { update() {}, stop() {} };
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: total > 0 ? `${label} [{bar}] {percentage}% | {eta_formatted} left` : `${label}: {value}`,
      hideCursor: true,
      clearOnComplete: true,
    },
    cliProgress.Presets.shades_classic,
  );
  bar.start(total > 0 ? total : 1e12, 0);
  let last = 0;
  return {
    update(value) {
      const now = Date.now();
      if (now - last < 100) return;
      last = now;
      bar.update(value);
    },
    stop() {
      bar.stop();
    },
  };
}
