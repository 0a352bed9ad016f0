/** The API's error codes (export-api.md 7; D4.1, D7.3, D7.4, D12.4; README is checked against it), and errors crossing modules. */

export const ERRORS = {
  BAD_REQUEST: { status: 400, message: 'Malformed request' },
  INVALID_PARAMETER: { status: 400, message: 'Invalid request parameter' },
  INVALID_API_KEY: { status: 401, message: 'Missing, invalid, expired or revoked API key' },
  BOOK_NOT_FOUND: { status: 404, message: 'Knowledge base not found' },
  NOT_FOUND: { status: 404, message: 'Route not found' },
  METHOD_NOT_ALLOWED: { status: 405, message: 'Method not allowed' },
  REQUEST_TIMEOUT: { status: 408, message: 'Request not received in time' },
  CHANGE_TOKEN_EXPIRED: { status: 410, message: 'The change token can no longer be honoured: take a full export' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'This API takes no request body' },
  RATE_LIMITED: { status: 429, message: 'Too many requests, retry later' },
  HEADERS_TOO_LARGE: { status: 431, message: 'Request headers too large' },
  EXPORT_FAILED: { status: 500, message: 'Export failed' },
  SERVICE_UNAVAILABLE: { status: 503, message: 'Service temporarily unavailable, retry later' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERRORS;

interface ErrorEnvelope {
  success: false;
  code: ErrorCode;
  message: string;
}

/** An error the API answers with: its code decides the status (export-api.md section 7). */
export class ApiError extends Error {
  override name = 'ApiError';
  readonly statusCode: number;
  /** @param retryAfterS seconds for `Retry-After` on a 429 or 503 (D8.1, D8.2, D8.5). */
  constructor(
    readonly code: ErrorCode,
    message: string = ERRORS[code].message,
    readonly retryAfterS?: number,
  ) {
    super(message);
    this.statusCode = ERRORS[code].status;
  }
}

export function envelope(code: ErrorCode, message: string = ERRORS[code].message): ErrorEnvelope {
  return { success: false, code, message };
}

/** Seconds a refused client is told to wait (D8.1, D8.2, D8.5): about one short export's time. */
export const RETRY_AFTER_S = 5;

/** The services kb-export depends on, named in a word (D10.6). */
export type Dependency = 'database' | 'replica' | 'redis';

/** A dependency could not be reached or did not answer in time: 503 before the first byte (D8.5). */
export class DependencyError extends Error {
  override name = 'DependencyError';
  constructor(
    readonly dependency: Dependency,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Why a client was dropped, for logs and metrics (D6.4, D8.3). */
export type GoneReason = 'gone' | 'stalled' | 'too-slow' | 'deadline';

const GONE_MESSAGES: Record<GoneReason, string> = {
  gone: 'client went away',
  stalled: 'client accepted nothing for the stall timeout',
  'too-slow': 'client accepted bytes more slowly than the drain floor',
  deadline: 'export reached its maximum duration',
};

/** The client went away or was dropped: the export stops, and nothing more is sent. */
export class ClientGoneError extends Error {
  override name = 'ClientGoneError';
  constructor(
    readonly reason: GoneReason,
    message = GONE_MESSAGES[reason],
  ) {
    super(message);
  }
}

/** A batch of contentHtml could not be rewritten; only the export that sent it fails (D8.6). */
export class RewriteWorkerError extends Error {
  override name = 'RewriteWorkerError';
}

/** A stored rewrite plan that cannot be read or does not fit its text: the text is tokenized instead. */
export class PlanFormatError extends Error {
  override name = 'PlanFormatError';
}

/** A configuration variable with a bad value: start-up stops with this message. */
export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
  }
}

/** A seed record that breaks seed-format.md: the file loads nothing. */
export class SeedError extends Error {
  override name = 'SeedError';
}
