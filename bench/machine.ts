/**
 * The machine a benchmark ran on, for the header of RESULTS.md: absolute figures mean little
 * without it, and the ratios are only comparable between runs on similar machines.
 */
import os from 'node:os';

/** The machine's description as the report prints it. */
export interface MachineInfo {
  /** CPU model name, e.g. `AMD EPYC 7763 64-Core Processor`. */
  cpu: string;
  /** CPUs this process may run on (affinity and cgroup limits applied, where Node.js sees them). */
  cores: number;
  /** Total memory, GiB with one decimal. */
  memGiB: number;
  /** Node.js version, e.g. `v20.20.2`. */
  node: string;
  /** Kernel name, release and architecture, e.g. `Linux 6.8.0 x64`. */
  os: string;
}

/** Describes the current machine from node:os. */
export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  // Some virtual machines and containers report an empty model name.
  const model = cpus[0]?.model.trim().replace(/\s+/g, ' ');
  return {
    cpu: model ? model : 'unknown CPU',
    cores: os.availableParallelism(),
    memGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
  };
}
