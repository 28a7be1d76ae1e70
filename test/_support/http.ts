// A small HTTP client for tests: every response is checked against openapi.yaml.
import type { ExecutionContext } from 'ava';
import { checkResponse } from './openapi.ts';

export interface ApiResponse<T = unknown> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface RequestOptions {
  body?: unknown;
  /** sent as is, for malformed-input tests */
  rawBody?: string | Uint8Array;
  headers?: Record<string, string>;
  apiKey?: string;
}

export class ApiClient {
  readonly baseUrl: string;
  readonly apiKey: string | undefined;
  private readonly t: ExecutionContext | undefined;

  constructor(baseUrl: string, apiKey?: string, t?: ExecutionContext) {
    this.baseUrl = baseUrl;
    this.apiKey = apiKey;
    this.t = t;
  }

  /** The same client reporting to another test's context. */
  for(t: ExecutionContext): ApiClient {
    return new ApiClient(this.baseUrl, this.apiKey, t);
  }

  async request<T = unknown>(
    method: string,
    path: string,
    options: RequestOptions = {},
  ): Promise<ApiResponse<T>> {
    const headers: Record<string, string> = { ...options.headers };
    const key = options.apiKey ?? this.apiKey;
    if (key !== undefined && !('x-api-key' in headers)) headers['x-api-key'] = key;
    let body: string | Uint8Array | undefined = options.rawBody;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] ??= 'application/json';
    }
    const response = await fetch(this.baseUrl + path, { method, headers, body });
    const text = await response.text();
    const contentType = response.headers.get('content-type') ?? '';
    let parsed: unknown = text;
    if (contentType.startsWith('application/json') && text) parsed = JSON.parse(text);
    const check = checkResponse(method, path, response.status, contentType, text === '' ? undefined : parsed);
    if (!check.ok) {
      if (this.t) this.t.fail(`openapi.yaml mismatch: ${check.problem} ${text.slice(0, 300)}`);
      else throw new Error(`openapi.yaml mismatch: ${check.problem}`);
    }
    return { status: response.status, headers: response.headers, body: parsed as T, text };
  }

  get<T = unknown>(path: string, options?: RequestOptions) {
    return this.request<T>('GET', path, options);
  }
  post<T = unknown>(path: string, body?: unknown, options?: RequestOptions) {
    return this.request<T>('POST', path, { ...options, body });
  }
  patch<T = unknown>(path: string, body?: unknown, options?: RequestOptions) {
    return this.request<T>('PATCH', path, { ...options, body });
  }
  delete<T = unknown>(path: string, options?: RequestOptions) {
    return this.request<T>('DELETE', path, options);
  }
}
