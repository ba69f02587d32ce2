export interface Address {
  street: string;
  city: string;
}

export interface Objects {
  readonly id: string;
  nickname?: string;
  middleName: string | undefined;
  "quoted-key": number;
  address: Address;
  inline: { lat: number; lon: number };
  scores: Record<string, number>;
  limits: Record<"min" | "max", number>;
  labels: { [key: string]: string };
  counted: { total: number; [name: string]: number };
  empty: {};
}
