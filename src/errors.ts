/**
 * The one table of error codes the API answers with, and their HTTP status
 * (export-api.md section 7, decisions.md D4.1, D7.3 and D7.4). README.md's error table is checked
 * against this one by test/errors.test.ts.
 */

export const ERRORS = {
  BAD_REQUEST: { status: 400, message: 'Malformed request' },
  INVALID_PARAMETER: { status: 400, message: 'Invalid request parameter' },
  INVALID_API_KEY: { status: 401, message: 'Missing, invalid, expired or revoked API key' },
  BOOK_NOT_FOUND: { status: 404, message: 'Knowledge base not found' },
  NOT_FOUND: { status: 404, message: 'Route not found' },
  METHOD_NOT_ALLOWED: { status: 405, message: 'Method not allowed' },
  REQUEST_TIMEOUT: { status: 408, message: 'Request not received in time' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'This API takes no request body' },
  RATE_LIMITED: { status: 429, message: 'Too many requests, retry later' },
  HEADERS_TOO_LARGE: { status: 431, message: 'Request headers too large' },
  EXPORT_FAILED: { status: 500, message: 'Export failed' },
  SERVICE_UNAVAILABLE: { status: 503, message: 'Service temporarily unavailable, retry later' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERRORS;

/** The flat error envelope of export-api.md section 7. */
interface ErrorEnvelope {
  success: false;
  code: ErrorCode;
  message: string;
}

/** An error the API answers with: its code decides the status (export-api.md section 7). */
export class ApiError extends Error {
  override name = 'ApiError';
  readonly statusCode: number;
  /**
   * @param retryAfterS seconds for the `Retry-After` header of a 429 or 503 (decisions.md D8.1,
   *   D8.2, D8.5); none when undefined.
   */
  constructor(
    readonly code: ErrorCode,
    message: string = ERRORS[code].message,
    readonly retryAfterS?: number,
  ) {
    super(message);
    this.statusCode = ERRORS[code].status;
  }
}

/** Builds the section 7 envelope for a code, with the table's message unless one is given. */
export function envelope(code: ErrorCode, message: string = ERRORS[code].message): ErrorEnvelope {
  return { success: false, code, message };
}
