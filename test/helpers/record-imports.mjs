// Loaded with `node --import`: records the URL of every module the process resolves, one per line,
// in the file named by KB_IMPORT_LOG, so a test can tell what a command really loaded.
import { register } from 'node:module';

register(new URL('./record-imports-hooks.mjs', import.meta.url), { data: { file: process.env.KB_IMPORT_LOG } });
