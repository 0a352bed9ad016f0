/**
 * A body the export cache kept, sent as an export is (D8.9, D8.10): the same writer
 * rules, and `stop` (the fleet-wide lease's loss, D11.1) fails it as it fails a streamed export.
 */
import type { ServerResponse } from 'node:http';
import { ClientGoneError } from '../errors.js';
import { EventLoopSlices } from '../event-loop.js';
import type { Kept } from './cache/export-cache.js';
import { exportHeaders } from './encode/body-format.js';
import type { ExportRequest } from './request/export-request.js';
import { bodySink } from './respond/compression.js';
import { ResponseWriter, type ResponseWriterOptions } from './respond/response-writer.js';
import { stopped, type Sent } from './respond/sent.js';

/**
 * A kept body is written a slice at a time, and a compressed one flushed after each, as a streamed
 * export is after each batch: what the client received decodes as it comes, so a client cut off
 * keeps what arrived (D9.3, D13.2).
 */
const KEPT_CHUNK_BYTES = 64 * 1024;

/** Compressed a slice at a time as it is written: no whole body is compressed on the event loop. */
export async function sendKeptBody(
  kept: Kept,
  version: string,
  request: Pick<ExportRequest, 'format' | 'encoding'>,
  res: ServerResponse,
  limits: ResponseWriterOptions,
  onHeaders: (version: string, token: string) => void,
  stop: AbortSignal | null = null,
): Promise<Sent> {
  const writer = new ResponseWriter(res, limits);
  const slices = new EventLoopSlices();
  const sink = bodySink(writer, request.encoding);
  const halted = stopped(stop);
  try {
    writer.check();
    onHeaders(version, kept.token);
    res.writeHead(200, exportHeaders(request.format, request.encoding));
    for (let at = 0; at < kept.body.length; at += KEPT_CHUNK_BYTES) {
      await Promise.race([sink.write(kept.body.subarray(at, at + KEPT_CHUNK_BYTES)), halted]);
      await Promise.race([sink.flush(), halted]);
      await slices.pause();
    }
    await Promise.race([sink.end(), halted]);
    res.end();
    return { outcome: 'complete', bytes: writer.bytes };
  } catch (err) {
    sink.destroy();
    res.destroy();
    if (err instanceof ClientGoneError) return { outcome: 'client_gone', reason: err.reason, bytes: writer.bytes };
    throw err;
  } finally {
    writer.close();
  }
}
