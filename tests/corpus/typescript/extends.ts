export interface Named {
  name: string;
}
export interface Timestamped {
  createdAt: Date;
  updatedAt?: Date;
}

/** A user: named, timestamped, and more. */
export interface User extends Named, Timestamped {
  email: string;
}

export interface Admin extends User {
  permissions: string[];
}

export type Tagged = Named & { tags: string[] };
export type Either = Named & ({ kind: "a"; a: number } | { kind: "b"; b: string });

export interface Inheritance {
  admin: Admin;
  tagged: Tagged;
  either: Either;
}
