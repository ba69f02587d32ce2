export interface User {
  id: number;
  name: string;
  email?: string;
}

export interface Page<T> {
  items: T[];
  total: number;
}

export interface Pair<A, B = A> {
  first: A;
  second: B;
}

export type Result<T> = { ok: true; value: T } | { ok: false; error: string };

export interface Generics {
  users: Page<User>;
  names: Page<string>;
  same: Pair<number>;
  mixed: Pair<string, boolean>;
  result: Result<User>;
  draft: Partial<User>;
  complete: Required<User>;
  summary: Pick<User, "id" | "name">;
  anonymous: Omit<User, "name" | "email">;
  fixed: Readonly<User>;
}
